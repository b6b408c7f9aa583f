#include "dist/store/store_clock.h"

#include <cstdint>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"

namespace dtrain::store {
namespace {

std::string Key(absl::string_view prefix, int asker, int round,
                absl::string_view what) {
  return absl::StrCat(prefix, "/clock/", asker, "/", round, "/", what);
}

}  // namespace

absl::StatusOr<ClockOffset> AskClock(Store& store, absl::string_view prefix,
                                     int asker, int rounds,
                                     absl::Duration timeout) {
  ClockOffset best;
  best.round_trip = absl::InfiniteDuration();
  for (int i = 0; i < rounds; ++i) {
    const absl::Time asked = absl::Now();
    DTRAIN_RETURN_IF_ERROR(store.Set(Key(prefix, asker, i, "ask"), ""));
    DTRAIN_ASSIGN_OR_RETURN(const std::string answer,
                            store.Get(Key(prefix, asker, i, "time"), timeout));
    const absl::Time answered = absl::Now();
    int64_t reference_ns = 0;
    if (!absl::SimpleAtoi(answer, &reference_ns)) {
      return absl::DataLossError(absl::StrCat(
          "the reference clock's answer to round ", i, " of asker ", asker,
          " is not a time: \"", answer.substr(0, 40), "\""));
    }
    const absl::Duration trip = answered - asked;
    if (trip < best.round_trip) {
      best.round_trip = trip;
      best.error = trip / 2;
      best.offset = absl::FromUnixNanos(reference_ns) - (asked + trip / 2);
    }
  }
  best.rounds = rounds;
  return best;
}

absl::Status AnswerClock(Store& store, absl::string_view prefix, int asker,
                         int rounds, absl::Duration timeout) {
  for (int i = 0; i < rounds; ++i) {
    DTRAIN_RETURN_IF_ERROR(
        store.Get(Key(prefix, asker, i, "ask"), timeout).status());
    DTRAIN_RETURN_IF_ERROR(
        store.Set(Key(prefix, asker, i, "time"),
                  absl::StrCat(absl::ToUnixNanos(absl::Now()))));
  }
  return absl::OkStatus();
}

}  // namespace dtrain::store
