// Which peer is gone, for the NCCL backend's errors. NCCL reports a lost peer
// as "remote process exited or there was a network error", without a rank.
// Each rank therefore publishes its host and process id through the store
// when the backend is created; when a collective fails, the ranks on this
// host whose process no longer exists are named ("rank 1 (pid 4242 on
// node01) has exited"). Peers on other hosts cannot be checked from here;
// their launcher names them (as the project's launcher does).
//
// The same records carry each rank's GPU (its UUID, which also tells MIG
// slices of one GPU apart, and its PCI bus id), so that ranks that would share
// one GPU are refused by name before NCCL's own refusal, which names no rank.
//
// Thread safety: every function is safe from any thread.
#ifndef DTRAIN_DIST_BACKEND_NCCL_PEERS_H_
#define DTRAIN_DIST_BACKEND_NCCL_PEERS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace dtrain::backend::nccl_internal {

struct Peer {
  int rank = 0;
  std::string host;
  int64_t pid = 0;
  int device = -1;     // The CUDA device index in its process; -1: unknown.
  std::string bus_id;  // "0000:1b:00.0"; empty: unknown.
  std::string uuid;    // "GPU-8f3c...", unique across machines; empty: unknown.
};

// This process: gethostname() and getpid(); no device.
Peer ThisProcess(int rank);

// "<pid> <device> <bus id or -> <uuid or -> <host>", the value published in
// the store, and back. kDataLoss for a value that is not of that form.
std::string EncodePeer(const Peer& peer);
absl::StatusOr<Peer> DecodePeer(int rank, absl::string_view value);

// "rank 1 (pid 4242 on node01) has exited", joined with "; ", for the peers
// other than `self` on `self`'s host that `alive` says are gone; empty when
// none is.
std::string DescribeLostPeers(absl::Span<const Peer> peers, const Peer& self,
                              const std::function<bool(int64_t)>& alive);

// kFailedPrecondition naming the first two ranks that would use the same GPU
// (the same UUID; without UUIDs, the same host name and bus id), with what to
// do; OK when none would. Peers that know neither are never counted as
// sharing.
absl::Status CheckDevicesDistinct(absl::Span<const Peer> peers);

}  // namespace dtrain::backend::nccl_internal

#endif  // DTRAIN_DIST_BACKEND_NCCL_PEERS_H_
