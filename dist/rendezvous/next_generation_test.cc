// The survivors' agreement on the next generation, with ranks as threads
// over one in-memory store and a scripted liveness probe: a gone rank is not
// waited for, an alive one is however late, a stopped one only for the
// grace; a rank left out is told so; the minimum holds on every rank; and
// every rank gets the same members in the old order.

#include "dist/rendezvous/next_generation.h"

#include <atomic>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "dist/store/hash_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::rendezvous {
namespace {

using ::testing::HasSubstr;

NextGenerationOptions Options(int rank, int n, int64_t committed) {
  NextGenerationOptions o;
  o.generation = 1;
  o.previous_world_size = n;
  o.self.previous_rank = rank;
  o.self.committed_step = committed;
  o.self.pid = 1000 + rank;
  o.self.host = "host a";
  o.stopped_grace = absl::Milliseconds(300);
  o.timeout = absl::Seconds(20);
  return o;
}

// Runs FormNextGeneration for `ranks` on threads, each `delay` late.
std::map<int, absl::StatusOr<Generation>> Form(
    store::Store& store, int n, const std::vector<int>& ranks,
    const std::function<PeerState(int)>& probe,
    const std::map<int, absl::Duration>& delay = {}, int min_ranks = 1) {
  std::mutex mu;
  std::map<int, absl::StatusOr<Generation>> out;
  std::vector<std::thread> threads;
  for (int r : ranks) {
    threads.emplace_back([&, r] {
      if (delay.count(r) > 0) absl::SleepFor(delay.at(r));
      NextGenerationOptions o = Options(r, n, /*committed=*/10 + r % 2);
      o.probe = probe;
      o.min_ranks = min_ranks;
      absl::StatusOr<Generation> g = FormNextGeneration(store, o);
      std::lock_guard<std::mutex> lock(mu);
      out.emplace(r, std::move(g));
    });
  }
  for (std::thread& t : threads) t.join();
  return out;
}

TEST(NextGenerationTest, GoneRankIsNotWaitedForAndRanksFollowTheOldOrder) {
  store::HashStore store;
  auto results = Form(store, 4, {0, 1, 3}, [](int r) {
    return r == 2 ? PeerState::kGone : PeerState::kAlive;
  });
  for (const auto& [r, g] : results) {
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_EQ(g->generation, 1);
    EXPECT_EQ(g->world_size, 3);
    // Rank 1 (step 11) first, then 0 (step 10) and 3.
    EXPECT_EQ(g->rank, r == 1 ? 0 : r == 0 ? 1 : 2);
    ASSERT_EQ(g->members.size(), 3u);
    EXPECT_EQ(g->members[0].previous_rank, 1);
    EXPECT_EQ(g->members[2].previous_rank, 3);
    EXPECT_EQ(g->members[2].pid, 1003);
    EXPECT_EQ(g->committed_step, 11);
  }
}

// Rank 0 is at a lower committed step than rank 1 (10 against 11): rank 1
// goes first, the others keep their order.
TEST(NextGenerationTest, RankAtTheHighestStepBecomesRankZero) {
  store::HashStore store;
  auto results =
      Form(store, 4, {0, 1, 2, 3}, [](int) { return PeerState::kAlive; });
  for (const auto& [r, g] : results) {
    ASSERT_TRUE(g.ok()) << g.status();
    ASSERT_EQ(g->members.size(), 4u);
    EXPECT_EQ(g->members[0].previous_rank, 1);
    EXPECT_EQ(g->members[1].previous_rank, 0);
    EXPECT_EQ(g->members[2].previous_rank, 2);
    EXPECT_EQ(g->members[3].previous_rank, 3);
    EXPECT_EQ(g->rank, r == 1 ? 0 : r == 0 ? 1 : r);
    EXPECT_EQ(g->committed_step, 11);
  }
}

TEST(NextGenerationTest, AliveRankIsWaitedForHoweverLate) {
  store::HashStore store;
  auto results =
      Form(store, 3, {0, 1, 2}, [](int) { return PeerState::kAlive; },
           {{2, absl::Seconds(1)}});
  for (const auto& [r, g] : results) {
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_EQ(g->world_size, 3);
    EXPECT_EQ(g->rank, r == 1 ? 0 : r == 0 ? 1 : r);
  }
}

// Stopped past the grace, rank 1 is left out; when it resumes and registers
// it is told so, naming the members.
TEST(NextGenerationTest, StoppedRankIsLeftOutAndToldSoWhenItComesBack) {
  store::HashStore store;
  std::atomic<bool> resumed{false};
  auto results = Form(store, 3, {0, 2}, [&](int r) {
    return r == 1 && !resumed ? PeerState::kStopped : PeerState::kAlive;
  });
  for (const auto& [r, g] : results) {
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_EQ(g->world_size, 2);
  }
  resumed = true;
  NextGenerationOptions late = Options(1, 3, 11);
  late.probe = [](int) { return PeerState::kAlive; };
  absl::StatusOr<Generation> g = FormNextGeneration(store, late);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(g.status().message()),
              HasSubstr("rank 1 was left out of generation 1, which ranks "
                        "0, 2 formed without it"));
}

// The store records the newest generation formed through it, raised only:
// what a rank that was stopped reads on the others' store.
TEST(NextGenerationTest, TheStoreRecordsTheLatestGeneration) {
  store::HashStore store;
  EXPECT_EQ(*LatestGeneration(store), 0);
  auto formed = Form(store, 2, {0, 1}, [](int) { return PeerState::kAlive; });
  for (const auto& [r, g] : formed) ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(*LatestGeneration(store), 1);
  NextGenerationOptions third = Options(0, 1, 20);
  third.generation = 3;
  third.probe = [](int) { return PeerState::kAlive; };
  ASSERT_TRUE(FormNextGeneration(store, third).ok());
  EXPECT_EQ(*LatestGeneration(store), 3);
  // A slow member of generation 1 reading its list afterwards lowers nothing.
  NextGenerationOptions slow = Options(1, 2, 11);
  slow.probe = [](int) { return PeerState::kAlive; };
  ASSERT_TRUE(FormNextGeneration(store, slow).ok());
  EXPECT_EQ(*LatestGeneration(store), 3);
  ASSERT_TRUE(store.Set("elastic/latest", "x").ok());
  EXPECT_EQ(LatestGeneration(store).status().code(),
            absl::StatusCode::kInternal);
}

TEST(NextGenerationTest, FewerThanTheMinimumFailsEveryRank) {
  store::HashStore store;
  auto results = Form(
      store, 4, {0, 1},
      [](int r) { return r >= 2 ? PeerState::kGone : PeerState::kAlive; }, {},
      /*min_ranks=*/3);
  for (const auto& [r, g] : results) {
    EXPECT_EQ(g.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(g.status().message()),
                HasSubstr("2 ranks left (0, 1), fewer than the minimum 3; "
                          "gone: 2, 3"));
  }
}

TEST(NextGenerationTest, TimeoutNamesWhoIsAwaited) {
  store::HashStore store;
  NextGenerationOptions o = Options(0, 3, 5);
  o.timeout = absl::Milliseconds(200);
  o.probe = [](int) { return PeerState::kAlive; };
  absl::StatusOr<Generation> g = FormNextGeneration(store, o);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(g.status().message()),
              HasSubstr("waiting for ranks 1, 2"));
}

TEST(NextGenerationTest, BadOptionsAndGarbageAreRefused) {
  store::HashStore store;
  NextGenerationOptions o = Options(3, 3, 0);
  o.probe = [](int) { return PeerState::kAlive; };
  EXPECT_EQ(FormNextGeneration(store, o).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(GenerationMember::Decode("1 2").ok());
  EXPECT_FALSE(GenerationMember::Decode("x 2 3 - h").ok());
  absl::StatusOr<GenerationMember> m =
      GenerationMember::Decode("2 40 77 10.0.0.1:99 node 3");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->standby, "10.0.0.1:99");
  EXPECT_EQ(m->host, "node 3");
}

// Grow: joiners queue, the members (all alive, between two steps) form the
// next generation with them after the previous members, admit them, and the
// joiners learn their ranks; beyond max_ranks a joiner stays queued.
TEST(NextGenerationTest, JoinersComeAfterThePreviousMembersUpToTheMaximum) {
  store::HashStore store;
  std::mutex mu;
  std::map<int, absl::StatusOr<Generation>> joined;
  std::vector<std::thread> joiners;
  for (int j = 0; j < 2; ++j) {
    joiners.emplace_back([&, j] {
      GenerationMember self;
      self.pid = 2000 + j;
      self.host = "host b";
      self.standby = "10.0.0.2:" + std::to_string(4000 + j);
      absl::StatusOr<Generation> g = JoinNextGeneration(
          store, self, j == 0 ? absl::Seconds(20) : absl::Seconds(2));
      std::lock_guard<std::mutex> lock(mu);
      joined.emplace(j, std::move(g));
    });
    // In this order: the first joiner's ticket is 1.
    while (!QueuedJoiners(store).ok() || *QueuedJoiners(store) < j + 1)
      absl::SleepFor(absl::Milliseconds(5));
  }
  std::map<int, absl::StatusOr<Generation>> members;
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      NextGenerationOptions o = Options(r, 2, /*committed=*/7);
      o.probe = [](int) { return PeerState::kAlive; };
      o.admit_joiners = true;
      o.max_ranks = 3;
      absl::StatusOr<Generation> g = FormNextGeneration(store, o);
      if (g.ok()) {
        absl::Status admitted = AdmitJoiners(store, *g);
        EXPECT_TRUE(admitted.ok()) << admitted;
      }
      std::lock_guard<std::mutex> lock(mu);
      members.emplace(r, std::move(g));
    });
  }
  for (std::thread& t : ranks) t.join();
  for (std::thread& t : joiners) t.join();
  for (const auto& [r, g] : members) {
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_EQ(g->world_size, 3);
    EXPECT_EQ(g->rank, r);
    EXPECT_EQ(g->committed_step, 7);
    ASSERT_EQ(g->members.size(), 3u);
    EXPECT_TRUE(g->members[2].joiner());
    EXPECT_EQ(g->members[2].previous_rank, -1);
    EXPECT_EQ(g->members[2].standby, "10.0.0.2:4000");
  }
  ASSERT_TRUE(joined.at(0).ok()) << joined.at(0).status();
  EXPECT_EQ(joined.at(0)->rank, 2);
  EXPECT_EQ(joined.at(0)->world_size, 3);
  EXPECT_EQ(joined.at(0)->generation, 1);
  // The second joiner found no room: still queued, and told why it waited.
  EXPECT_EQ(joined.at(1).status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(joined.at(1).status().message(), HasSubstr("maximum of ranks"));
  EXPECT_EQ(*QueuedJoiners(store), 1);
}

TEST(NextGenerationTest, MembersEncodeAndDecodeBack) {
  GenerationMember m;
  m.previous_rank = -3;
  m.committed_step = -1;
  m.pid = 42;
  m.standby = "[::1]:5000";
  m.host = "a host";
  absl::StatusOr<GenerationMember> back = GenerationMember::Decode(m.Encode());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->previous_rank, -3);
  EXPECT_EQ(back->standby, "[::1]:5000");
  EXPECT_EQ(back->host, "a host");
  EXPECT_TRUE(back->joiner());
  EXPECT_FALSE(GenerationMember::Decode("1 2 3").ok());
}

}  // namespace
}  // namespace dtrain::rendezvous
