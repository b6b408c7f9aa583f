// The rendezvous step: every rank registers itself in the store and waits until
// all ranks of the world have. It catches, on every rank, the mistakes that
// otherwise surface later as hangs: two processes claiming one rank, and ranks
// that disagree about the world size. A timeout names the missing ranks:
//
//   [rank 0] rendezvous at tcp://10.0.0.1:29500 timed out after 30s: 3/4 ranks
//   joined; missing: rank 2
//
// The store work of a wait does not grow with the world size, so the timeout
// holds for any: ranks count themselves in and the last one sets one key that
// the others wait on. After a timeout the message names at most 16 missing
// ranks, looked for during at most 1 s.
//
// Call order: every rank calls Rendezvous once per store namespace. To
// rendezvous again over the same store (a restart), use a fresh PrefixStore
// (e.g. one per restart generation). Thread-safe as the store is: ranks may be
// threads of one process.
#ifndef DTRAIN_DIST_RENDEZVOUS_RENDEZVOUS_H_
#define DTRAIN_DIST_RENDEZVOUS_RENDEZVOUS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dist/store/store.h"

namespace dtrain::rendezvous {

struct PeerInfo {
  int rank = 0;
  int world_size = 0;
  int local_rank = 0;
  std::string host;
  int64_t pid = 0;

  std::string Encode() const;
  static absl::StatusOr<PeerInfo> Decode(absl::string_view text);
  // "rank 2 (node03, pid 4242)".
  std::string Describe() const;
};

struct RendezvousOptions {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  // Defaults to this machine's hostname and process id.
  std::string host;
  int64_t pid = 0;
  absl::Duration timeout = absl::Seconds(300);
};

// Returns every rank's PeerInfo, indexed by rank. Errors: kInvalidArgument for
// a bad rank or world size, kAlreadyExists for a duplicate rank (reported to
// the other ranks too, unless every rank had met already: then the claimant
// is of another job, which is left alone),
// kFailedPrecondition for disagreeing world sizes (reported on every rank),
// kDeadlineExceeded naming the missing ranks, or the store's own error.
absl::StatusOr<std::vector<PeerInfo>> Rendezvous(
    store::Store& store, const RendezvousOptions& options);

}  // namespace dtrain::rendezvous

#endif  // DTRAIN_DIST_RENDEZVOUS_RENDEZVOUS_H_
