// The host barrier with ranks as threads over one Control block: many
// rounds, and each way a wait ends badly (a peer that exited, one that gave
// up, the deadline) with the ranks named.

#include "dist/backend/shm/group_barrier.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::backend::shm {
namespace {

using ::testing::HasSubstr;

struct Block {
  Block() : control(Control::Init(memory.get())) {}
  std::unique_ptr<std::aligned_storage_t<sizeof(Control), 64>> memory =
      std::make_unique<std::aligned_storage_t<sizeof(Control), 64>>();
  Control* control;
};

bool Alive(int64_t) { return true; }

TEST(GroupBarrierTest, NoRankPassesBeforeAllArrive) {
  constexpr int kRanks = 4;
  constexpr int kRounds = 2000;
  Block block;
  // Each rank bumps its counter, passes the barrier, and then every counter
  // must be at least the round: nobody ran ahead.
  std::vector<std::atomic<int>> done(kRanks);
  std::atomic<bool> ok{true};
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      GroupBarrier b(block.control, r, kRanks, Alive);
      b.Register(1000 + r);
      for (int round = 1; round <= kRounds; ++round) {
        done[r].store(round);
        if (!b.Arrive(absl::InfiniteFuture()).ok()) ok = false;
        for (int q = 0; q < kRanks; ++q) {
          if (done[q].load() < round) ok = false;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_TRUE(ok.load());
}

TEST(GroupBarrierTest, DeadlineNamesTheRanksThatDidNotArrive) {
  Block block;
  GroupBarrier b0(block.control, 0, 4, Alive);
  GroupBarrier b2(block.control, 2, 4, Alive);
  std::thread t([&] { (void)b2.Arrive(absl::Now() + absl::Seconds(1)); });
  const absl::Status s = b0.Arrive(absl::Now() + absl::Milliseconds(200));
  t.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_EQ(s.message(), "ranks 1, 3 have not arrived");
}

TEST(GroupBarrierTest, ExitedPeerIsNamedLongBeforeTheDeadline) {
  Block block;
  GroupBarrier b0(block.control, 0, 2, [](int64_t pid) { return pid != 77; });
  GroupBarrier b1(block.control, 1, 2, Alive);
  b1.Register(77);
  const absl::Time start = absl::Now();
  const absl::Status s = b0.Arrive(absl::InfiniteFuture());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_EQ(s.message(), "rank 1 (pid 77) has exited");
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));  // Not the deadline.
}

TEST(GroupBarrierTest, AbortWakesTheWaiters) {
  Block block;
  GroupBarrier b0(block.control, 0, 3, Alive);
  GroupBarrier b2(block.control, 2, 3, Alive);
  absl::Status s;
  std::thread waiter([&] { s = b0.Arrive(absl::InfiniteFuture()); });
  absl::SleepFor(absl::Milliseconds(20));
  b2.Abort();
  waiter.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("rank 2 gave up"));
}

}  // namespace
}  // namespace dtrain::backend::shm
