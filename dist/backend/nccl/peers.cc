#include "dist/backend/nccl/peers.h"

#include <unistd.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dtrain::backend::nccl_internal {

Peer ThisProcess(int rank) {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  return Peer{rank, host, static_cast<int64_t>(::getpid())};
}

std::string EncodePeer(const Peer& peer) {
  return absl::StrCat(peer.pid, " ", peer.host);
}

absl::StatusOr<Peer> DecodePeer(int rank, absl::string_view value) {
  const size_t space = value.find(' ');
  Peer peer;
  peer.rank = rank;
  if (space == absl::string_view::npos ||
      !absl::SimpleAtoi(value.substr(0, space), &peer.pid) || peer.pid <= 0) {
    return absl::DataLossError(absl::StrCat("rank ", rank,
                                            "'s process record '", value,
                                            "' is not '<pid> <host>'"));
  }
  peer.host = std::string(value.substr(space + 1));
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

}  // namespace dtrain::backend::nccl_internal
