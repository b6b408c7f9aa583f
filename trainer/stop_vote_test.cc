// StopVote as a Joinable (dist/ddp/join.h), ranks as threads: a rank that
// ran out of inputs and is then asked to stop stops the rank still training,
// through the vote it casts while shadowing; votes follow synchronised
// rounds only.

#include "trainer/stop_vote.h"

#include <atomic>
#include <memory>
#include <vector>

#include "absl/time/time.h"
#include "dist/backend/backend_testing.h"
#include "dist/ddp/join.h"
#include "gtest/gtest.h"
#include "trainer/trainer_testing.h"

namespace dtrain::trainer {
namespace {

TEST(StopVoteTest, AJoinedRanksSignalStopsTheActiveRanks) {
  constexpr int kWorld = 3;
  std::vector<std::atomic<bool>> stop(kWorld);
  std::vector<int> trained(kWorld, 0);
  std::vector<char> shadowed_stop(kWorld, 0);
  backend::testing::RunRanks(kWorld, testing::Gloo, [&](backend::Backend& b) {
    const int rank = b.rank();
    backend::SmallCollectives sync(b, c10::Device(c10::kCPU),
                                   absl::Seconds(60));
    StopVote vote(sync, &stop[rank]);
    auto join = ddp::Join::Create({&vote}, b);
    ASSERT_TRUE(join.ok()) << join.status();
    // Ranks 0 and 1 have 2 steps, rank 2 has 10; each step is a round
    // without gradient sync (no vote) and one with it, then the vote.
    const int steps = rank == 2 ? 10 : 2;
    for (int s = 0; s < steps; ++s) {
      ASSERT_TRUE((*join)->NotifyActive(true, false).ok());
      ASSERT_TRUE((*join)->NotifyActive(true, true).ok());
      ++trained[rank];
      vote.Issue();
      absl::StatusOr<bool> stopped = vote.Collect();
      ASSERT_TRUE(stopped.ok()) << stopped.status();
      if (*stopped) break;
    }
    // Rank 0 gets its signal after running out.
    if (rank == 0) stop[0] = true;
    absl::StatusOr<ddp::JoinSummary> summary = (*join)->JoinAndShadow();
    ASSERT_TRUE(summary.ok()) << summary.status();
    shadowed_stop[rank] = vote.ShadowedStop();
    EXPECT_FALSE(vote.ShadowedStop());  // Cleared when read.
  });
  // Rank 2 stopped after its third step, the first that rank 0 shadowed.
  EXPECT_EQ(trained[2], 3);
  EXPECT_TRUE(shadowed_stop[0]);
  EXPECT_TRUE(shadowed_stop[1]);
  EXPECT_FALSE(shadowed_stop[2]);
}

// An elastic run's second question: one rank's regroup flag reaches every
// rank in the same vote, apart from the stop answer, and is cleared when the
// flag is.
TEST(StopVoteTest, OneRanksRegroupReachesEveryRankInTheSameVote) {
  constexpr int kWorld = 3;
  std::vector<std::atomic<bool>> stop(kWorld);
  std::atomic<bool> regroup{false};
  std::atomic<bool> never{false};
  std::vector<std::vector<int>> seen(kWorld);
  backend::testing::RunRanks(kWorld, testing::Gloo, [&](backend::Backend& b) {
    const int rank = b.rank();
    backend::SmallCollectives sync(b, c10::Device(c10::kCPU),
                                   absl::Seconds(60));
    StopVote vote(sync, &stop[rank], /*collective=*/true,
                  rank == 1 ? &regroup : &never);
    for (int s = 0; s < 4; ++s) {
      // Rank 1's flag is up for the third vote only; set and cleared
      // between votes, as rank 0 of an elastic run sets it.
      if (rank == 1) regroup = (s == 2);
      vote.Issue();
      absl::StatusOr<bool> stopped = vote.Collect();
      ASSERT_TRUE(stopped.ok()) << stopped.status();
      EXPECT_FALSE(*stopped);
      seen[rank].push_back(vote.regroup() ? 1 : 0);
    }
  });
  for (int r = 0; r < kWorld; ++r)
    EXPECT_EQ(seen[r], (std::vector<int>{0, 0, 1, 0})) << "rank " << r;
}

}  // namespace
}  // namespace dtrain::trainer
