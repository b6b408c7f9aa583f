// Naming the peer that is gone: the record format and the choice of whom to
// name, with a scripted liveness probe; and the real probe on this process
// and on a child that has exited.

#include "dist/backend/nccl/peers.h"

#include <unistd.h>

#include "gtest/gtest.h"

namespace dtrain::backend::nccl_internal {
namespace {

TEST(PeersTest, RecordsRoundTrip) {
  const Peer p{3, "node01.cluster", 4242,
               1, "0000:1b:00.0",   "GPU-8f3c2a10-0000-1111-2222-333344445555"};
  absl::StatusOr<Peer> back = DecodePeer(3, EncodePeer(p));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->rank, 3);
  EXPECT_EQ(back->host, "node01.cluster");
  EXPECT_EQ(back->pid, 4242);
  EXPECT_EQ(back->device, 1);
  EXPECT_EQ(back->bus_id, "0000:1b:00.0");
  EXPECT_EQ(back->uuid, "GPU-8f3c2a10-0000-1111-2222-333344445555");
  absl::StatusOr<Peer> no_gpu = DecodePeer(0, EncodePeer(ThisProcess(0)));
  ASSERT_TRUE(no_gpu.ok()) << no_gpu.status();
  EXPECT_EQ(no_gpu->device, -1);
  EXPECT_EQ(no_gpu->bus_id, "");
  EXPECT_EQ(no_gpu->uuid, "");
}

TEST(PeersTest, GarbageRecordsAreDataLoss) {
  for (absl::string_view bad :
       {"", "4242", "abc host", "-1 host", "0 host", "4242 host",
        "4242 x - - host", "4242 -2 - - host", "4242 0 bus host", "4242 0 - - ",
        "4242 0 bus uuid"}) {
    absl::StatusOr<Peer> p = DecodePeer(2, bad);
    EXPECT_EQ(p.status().code(), absl::StatusCode::kDataLoss) << bad;
  }
  EXPECT_NE(DecodePeer(2, "x").status().message().find("rank 2"),
            absl::string_view::npos);
}

TEST(PeersTest, NamesOnlyDeadPeersOnThisHost) {
  const std::vector<Peer> peers = {{0, "a", 100, -1, "", ""},
                                   {1, "a", 101, -1, "", ""},
                                   {2, "b", 102, -1, "", ""},
                                   {3, "a", 103, -1, "", ""}};
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

// The defect this guards: with one visible GPU every local rank was put on
// cuda:0, and NCCL refused the job naming no rank.
TEST(PeersTest, RanksThatWouldShareAGpuAreRefusedByName) {
  const std::string u1 = "GPU-11111111-0000-0000-0000-000000000000";
  const std::string u2 = "GPU-22222222-0000-0000-0000-000000000000";
  // Two machines that both call themselves "a" (containers), with the GPU at
  // the same bus id: different GPUs, as their UUIDs say.
  const std::vector<Peer> distinct = {{0, "a", 100, 0, "0000:1b:00.0", u1},
                                      {1, "a", 101, 0, "0000:1b:00.0", u2},
                                      {2, "b", 102, 0, "0000:1b:00.0", ""},
                                      {3, "b", 103, 1, "0000:1c:00.0", ""},
                                      {4, "b", 104, -1, "", ""},
                                      {5, "b", 105, -1, "", ""}};
  EXPECT_TRUE(CheckDevicesDistinct(distinct).ok());
  // Two visible devices that are one GPU (the same UUID) count too.
  const std::vector<Peer> shared = {{0, "a", 100, 0, "0000:1b:00.0", u1},
                                    {1, "b", 101, 0, "0000:1b:00.0", u2},
                                    {2, "a", 102, 1, "0000:1c:00.0", ""},
                                    {3, "a", 103, 0, "0000:1b:00.0", u1}};
  const absl::Status s = CheckDevicesDistinct(shared);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(std::string(s.message())
                .find("ranks 0 and 3 would share one GPU (" + u1 +
                      ", PCI 0000:1b:00.0 on a; cuda:0 in rank 0's process, "
                      "cuda:0 in rank 3's): NCCL runs one rank per GPU."),
            0u)
      << s;
  EXPECT_NE(s.message().find("DTRAIN_NCCL_SHARE_GPU=1"),
            absl::string_view::npos);
  // Without UUIDs, the host name and the bus id.
  const std::vector<Peer> no_uuids = {{0, "a", 100, 0, "0000:1b:00.0", ""},
                                      {1, "a", 101, 0, "0000:1b:00.0", ""}};
  EXPECT_EQ(CheckDevicesDistinct(no_uuids).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(PeersTest, ThisProcess) {
  const Peer self = ThisProcess(0);
  EXPECT_FALSE(self.host.empty());
  EXPECT_EQ(self.pid, ::getpid());
}

}  // namespace
}  // namespace dtrain::backend::nccl_internal
