#include "dist/backend/nccl/peers.h"

#include <unistd.h>

#include <map>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace dtrain::backend::nccl_internal {

Peer ThisProcess(int rank) {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  Peer self;
  self.rank = rank;
  self.host = host;
  self.pid = static_cast<int64_t>(::getpid());
  return self;
}

std::string EncodePeer(const Peer& peer) {
  return absl::StrCat(peer.pid, " ", peer.device, " ",
                      peer.bus_id.empty() ? "-" : peer.bus_id, " ",
                      peer.uuid.empty() ? "-" : peer.uuid, " ", peer.host);
}

absl::StatusOr<Peer> DecodePeer(int rank, absl::string_view value) {
  const std::vector<absl::string_view> f =
      absl::StrSplit(value, absl::MaxSplits(' ', 4));
  Peer peer;
  peer.rank = rank;
  if (f.size() != 5 || !absl::SimpleAtoi(f[0], &peer.pid) || peer.pid <= 0 ||
      !absl::SimpleAtoi(f[1], &peer.device) || peer.device < -1 ||
      f[2].empty() || f[3].empty() || f[4].empty()) {
    return absl::DataLossError(
        absl::StrCat("rank ", rank, "'s process record '", value,
                     "' is not '<pid> <device> <bus id> <uuid> <host>'"));
  }
  if (f[2] != "-") peer.bus_id = std::string(f[2]);
  if (f[3] != "-") peer.uuid = std::string(f[3]);
  peer.host = std::string(f[4]);
  return peer;
}

std::string DescribeLostPeers(absl::Span<const Peer> peers, const Peer& self,
                              const std::function<bool(int64_t)>& alive) {
  std::vector<std::string> lost;
  for (const Peer& p : peers) {
    if (p.rank == self.rank || p.host != self.host || alive(p.pid)) continue;
    lost.push_back(absl::StrCat("rank ", p.rank, " (pid ", p.pid, " on ",
                                p.host, ") has exited"));
  }
  return absl::StrJoin(lost, "; ");
}

absl::Status CheckDevicesDistinct(absl::Span<const Peer> peers) {
  // Host names alone may repeat across machines (containers): a UUID, where
  // known, is the GPU itself.
  std::map<std::string, const Peer*> first;
  for (const Peer& p : peers) {
    if (p.uuid.empty() && p.bus_id.empty()) continue;
    const std::string key =
        !p.uuid.empty() ? p.uuid : absl::StrCat(p.host, " ", p.bus_id);
    auto [it, inserted] = first.emplace(key, &p);
    if (inserted) continue;
    const Peer& q = *it->second;
    return absl::FailedPreconditionError(absl::StrCat(
        "ranks ", q.rank, " and ", p.rank, " would share one GPU (",
        p.uuid.empty() ? "" : absl::StrCat(p.uuid, ", "), "PCI ",
        p.bus_id.empty() ? "?" : p.bus_id, " on ", p.host, "; cuda:", q.device,
        " in rank ", q.rank, "'s process, cuda:", p.device, " in rank ", p.rank,
        "'s): NCCL runs one rank per GPU. Start at most as many ranks on a "
        "host as it has GPUs, each on its own (the launcher gives local rank "
        "i cuda:i; check CUDA_VISIBLE_DEVICES), or set "
        "DTRAIN_NCCL_SHARE_GPU=1 to let ranks share a GPU for testing"));
  }
  return absl::OkStatus();
}

}  // namespace dtrain::backend::nccl_internal
