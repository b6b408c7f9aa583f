// How far this process's clock is from a reference process's, measured
// through a store both reach (Cristian's algorithm): the asker notes its
// clock, asks, and notes it again when the reference's reading comes back;
// the reading was taken somewhere within that round trip, so the offset is
// known to within half of it. The shortest of several round trips is kept.
//
//   reference:  DTRAIN_RETURN_IF_ERROR(AnswerClock(store, "trace", 2, 8, t));
//   rank 2:     DTRAIN_ASSIGN_OR_RETURN(ClockOffset c,
//                                       AskClock(store, "trace", 2, 8, t));
//
// The two sides call with the same prefix, asker id and rounds; the
// reference answers one asker after another, in any order. Keys used:
// "<prefix>/clock/<asker>/<round>/ask" and ".../time". Thread-safe as the
// store is; the store must outlive the calls.
#ifndef DTRAIN_DIST_STORE_STORE_CLOCK_H_
#define DTRAIN_DIST_STORE_STORE_CLOCK_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "dist/store/store.h"

namespace dtrain::store {

struct ClockOffset {
  // The reference's clock reads this much more than this process's at the
  // same moment: reference time = local time + offset.
  absl::Duration offset;
  // The true offset is within offset +- error: half the shortest round trip
  // (clocks that drift apart during one round trip aside).
  absl::Duration error;
  // The shortest round trip's length, and how many were made.
  absl::Duration round_trip;
  int rounds = 0;
};

// The asker's side: `rounds` (>= 1) round trips with the reference through
// `store`, each waiting at most `timeout` for the answer. Errors: the
// store's (a reference that does not answer: kDeadlineExceeded from Get),
// kDataLoss for an answer that is not a time.
absl::StatusOr<ClockOffset> AskClock(Store& store, absl::string_view prefix,
                                     int asker, int rounds,
                                     absl::Duration timeout);

// The reference's side: answers asker `asker`'s `rounds` questions, waiting
// at most `timeout` for each. Errors: the store's.
absl::Status AnswerClock(Store& store, absl::string_view prefix, int asker,
                         int rounds, absl::Duration timeout);

}  // namespace dtrain::store

#endif  // DTRAIN_DIST_STORE_STORE_CLOCK_H_
