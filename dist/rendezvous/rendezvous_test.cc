// The rendezvous step with ranks as threads over one store: success at several
// world sizes, and every failure it exists to catch.

#include "dist/rendezvous/rendezvous.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "dist/store/hash_store.h"
#include "dist/store/tcp_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::rendezvous {
namespace {

using store::HashStore;
using store::Store;
using store::TcpStore;
using store::TcpStoreOptions;
using ::testing::HasSubstr;

RendezvousOptions Options(int rank, int world_size,
                          absl::Duration timeout = absl::Seconds(30)) {
  RendezvousOptions o;
  o.rank = rank;
  o.world_size = world_size;
  o.local_rank = rank;
  o.host = "testhost";
  o.pid = 1000 + rank;
  o.timeout = timeout;
  return o;
}

// Runs Rendezvous for each options entry on its own thread and returns the
// results in order.
std::vector<absl::StatusOr<std::vector<PeerInfo>>> RunRanks(
    Store& store, const std::vector<RendezvousOptions>& ranks) {
  std::vector<absl::StatusOr<std::vector<PeerInfo>>> results(
      ranks.size(), absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < ranks.size(); ++i) {
    threads.emplace_back([&, i] { results[i] = Rendezvous(store, ranks[i]); });
  }
  for (auto& t : threads) t.join();
  return results;
}

class RendezvousWorldSizeTest : public ::testing::TestWithParam<int> {};

TEST_P(RendezvousWorldSizeTest, EveryRankSeesEveryPeer) {
  const int n = GetParam();
  HashStore store;
  std::vector<RendezvousOptions> ranks;
  for (int r = 0; r < n; ++r) ranks.push_back(Options(r, n));
  auto results = RunRanks(store, ranks);
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(results[r].ok()) << results[r].status();
    ASSERT_EQ(results[r]->size(), static_cast<size_t>(n));
    for (int p = 0; p < n; ++p) {
      EXPECT_EQ((*results[r])[p].rank, p);
      EXPECT_EQ((*results[r])[p].pid, 1000 + p);
      EXPECT_EQ((*results[r])[p].host, "testhost");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, RendezvousWorldSizeTest,
                         ::testing::Values(1, 2, 7, 64));

TEST(RendezvousTest, TimeoutNamesMissingRanks) {
  HashStore store;
  // Ranks 0, 1 and 3 of 4 come; rank 2 never does.
  auto results = RunRanks(store, {Options(0, 4, absl::Milliseconds(300)),
                                  Options(1, 4, absl::Milliseconds(300)),
                                  Options(3, 4, absl::Milliseconds(300))});
  ASSERT_FALSE(results[0].ok());
  EXPECT_EQ(results[0].status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(results[0].status().message(),
              HasSubstr("[rank 0] rendezvous at hash store"));
  EXPECT_THAT(results[0].status().message(),
              HasSubstr("3/4 ranks joined; missing: rank 2"));
  EXPECT_THAT(results[0].status().message(), HasSubstr("timed out after"));
}

TEST(RendezvousTest, DuplicateRankFailsOnBothClaimants) {
  HashStore store;
  RendezvousOptions second = Options(1, 2, absl::Seconds(5));
  second.pid = 9999;
  auto results = RunRanks(store, {Options(0, 2, absl::Seconds(5)),
                                  Options(1, 2, absl::Seconds(5)), second});
  int already_exists = 0;
  for (const auto& r : results) {
    if (!r.ok() && r.status().code() == absl::StatusCode::kAlreadyExists) {
      ++already_exists;
      EXPECT_THAT(r.status().message(), HasSubstr("rank 1 is claimed twice"));
      EXPECT_THAT(r.status().message(), HasSubstr("belongs to another job"));
    }
  }
  EXPECT_EQ(already_exists, 1);
  // Rank 0 may have finished before the second claimant arrived; the two
  // claimants of rank 1 must not both succeed.
  EXPECT_FALSE(results[1].ok() && results[2].ok());
}

// A process of another job reaching a store whose ranks met already: it is
// told so, and the job under way is not told to fail.
TEST(RendezvousTest, LateClaimantOfAJobUnderWayLeavesItAlone) {
  HashStore store;
  auto met = RunRanks(store, {Options(0, 2, absl::Seconds(5)),
                              Options(1, 2, absl::Seconds(5))});
  ASSERT_TRUE(met[0].ok() && met[1].ok());
  RendezvousOptions stranger = Options(1, 2, absl::Seconds(5));
  stranger.pid = 9999;
  absl::StatusOr<std::vector<PeerInfo>> r = Rendezvous(store, stranger);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(r.status().message(), HasSubstr("rank 1 is claimed twice"));
  EXPECT_THAT(r.status().message(),
              HasSubstr("it belongs to another job that is running"));
  absl::StatusOr<bool> error = store.Check({"rdzv/error"});
  ASSERT_TRUE(error.ok());
  EXPECT_FALSE(*error) << "the job under way was told to fail";
}

TEST(RendezvousTest, DisagreeingWorldSizesFailOnEveryRank) {
  HashStore store;
  auto results = RunRanks(store, {Options(0, 2, absl::Seconds(10)),
                                  Options(1, 3, absl::Seconds(10))});
  // Every rank, not only the first to check, names both numbers and who said
  // each.
  for (const auto& r : results) {
    ASSERT_FALSE(r.ok());
    EXPECT_THAT(r.status().message(), HasSubstr("disagree on the world size"));
    EXPECT_THAT(r.status().message(),
                HasSubstr("rank 0 (testhost, pid 1000) says 2"));
    EXPECT_THAT(r.status().message(),
                HasSubstr("rank 1 (testhost, pid 1001) says 3"));
  }
}

TEST(RendezvousTest, BadRankOrWorldSizeIsInvalidArgument) {
  HashStore store;
  EXPECT_EQ(Rendezvous(store, Options(2, 2)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Rendezvous(store, Options(-1, 2)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Rendezvous(store, Options(0, 0)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RendezvousTest, OverTcpStoreWithEightRanks) {
  TcpStoreOptions o;
  o.host = o.bind_host = "127.0.0.1";
  o.port = 0;
  o.is_server = true;
  auto server = TcpStore::Create(o);
  ASSERT_TRUE(server.ok()) << server.status();
  constexpr int kRanks = 8;
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      TcpStoreOptions c;
      c.host = "127.0.0.1";
      c.port = (*server)->port();
      auto client = TcpStore::Create(c);
      if (!client.ok()) return;
      auto peers = Rendezvous(**client, Options(r, kRanks));
      if (peers.ok() && peers->size() == kRanks) ++ok;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), kRanks);
}

TEST(PeerInfoTest, EncodeDecodeRoundTripAndGarbage) {
  PeerInfo p{3, 8, 1, "node with spaces", 4242};
  absl::StatusOr<PeerInfo> q = PeerInfo::Decode(p.Encode());
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->host, "node with spaces");
  EXPECT_EQ(q->pid, 4242);
  EXPECT_EQ(q->Describe(), "rank 3 (node with spaces, pid 4242)");
  EXPECT_FALSE(PeerInfo::Decode("garbage").ok());
  EXPECT_FALSE(PeerInfo::Decode("1 2 x 4 h").ok());
}

}  // namespace
}  // namespace dtrain::rendezvous
