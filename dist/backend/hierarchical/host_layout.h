// Which ranks of a job share a host, decided from what each process can
// observe of itself rather than from LOCAL_WORLD_SIZE or host names: the
// kernel's boot id (one per running kernel) and the inode of its PID namespace
// (two containers on one kernel usually have different ones). Ranks with equal
// keys can open each other's memory through /proc/<pid>/fd, which is what the
// shared-memory backend then proves by mapping one segment (segment.h).
//
// Thread safety: the functions are pure or read only /proc; ExchangeHostKeys
// is as thread-safe as the store it is given.
#ifndef DTRAIN_DIST_BACKEND_HIERARCHICAL_HOST_LAYOUT_H_
#define DTRAIN_DIST_BACKEND_HIERARCHICAL_HOST_LAYOUT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "dist/store/store.h"

namespace dtrain::backend::hierarchical {

// "boot <boot_id> pidns <dev>:<inode>" for the calling process; kUnavailable
// when /proc does not say (no /proc mounted).
absl::StatusOr<std::string> LocalHostKey();

// The ranks grouped by host. Hosts are ordered by their lowest rank, and the
// ranks of a host ascending, so every rank computes the same layout from the
// same keys; a host's first rank is its leader.
struct HostLayout {
  std::vector<std::vector<int>> hosts;
  int host = 0;        // this rank's host, an index into `hosts`
  int local_rank = 0;  // this rank's position in hosts[host]

  int local_size() const { return static_cast<int>(hosts[host].size()); }
  bool leader() const { return local_rank == 0; }
  // The host of `rank` and its position there.
  int HostOf(int rank) const;
  int LocalRankOf(int rank) const;
  // "ranks 0, 1 | 2, 3" for messages and logs.
  std::string ToString() const;
};

// The layout from every rank's key (keys[r] is rank r's); kInvalidArgument for
// an empty key or `rank` outside keys.
absl::StatusOr<HostLayout> LayoutFromKeys(absl::Span<const std::string> keys,
                                          int rank);

// Publishes `key` as `rank`'s in `store` and reads every rank's, waiting until
// `deadline`; the error names the ranks that did not publish.
absl::StatusOr<std::vector<std::string>> ExchangeHostKeys(
    store::Store& store, int rank, int world_size, const std::string& key,
    absl::Time deadline);

}  // namespace dtrain::backend::hierarchical

#endif  // DTRAIN_DIST_BACKEND_HIERARCHICAL_HOST_LAYOUT_H_
