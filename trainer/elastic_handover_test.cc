// An elastic run's hand-over, with ranks as threads: a generation that ends
// after a committed step hands each rank's state over, the ranks' states are
// the same bytes, and a smaller generation started from rank 0's bytes ends
// exactly as the same smaller world resumed from a checkpoint at that step.
// The smaller world is one rank: ranks as threads share LibTorch's dropout
// generator, so only one rank's run repeats exactly (the ConvNet has
// dropout); across processes the test is the launcher's.

#include "trainer/elastic_handover.h"

#include <atomic>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/trainer.h"
#include "trainer/trainer_testing.h"

namespace dtrain::trainer {
namespace {

using testing::ExpectSameParameters;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::SmallRun;
using testing::TempDir;
using testing::TrainOnRanks;

// Train on `world` rank threads, each with its own hand-over (`start` for
// all); every rank asked to stop when `stop` (they stop after step 1).
std::vector<absl::StatusOr<TrainResult>> Generation(
    const TrainOptions& o, int world, const ElasticHandover& start, bool stop,
    std::vector<ElasticHandover>* out, std::ostream* log = nullptr) {
  out->assign(world, start);
  std::atomic<bool> stop_flag{stop};
  return TrainOnRanks(o, world, [&](int rank, TrainContext& context) {
    if (rank == 0 && log != nullptr) context.log = log;
    context.stop_requested = &stop_flag;
    context.elastic = &(*out)[rank];
  });
}

TEST(ElasticHandoverTest, SmallerGenerationGoesOnAsAResumeWould) {
  TrainOptions o = SmallRun();
  o.optim.epochs = 1;
  o.skip_validation = true;
  o.checkpoint.checkpoint_dir = TempDir("elastic_first");
  // Generation 0: 2 ranks, stopped after their first step (kCancelled), which
  // also writes the reference checkpoint.
  std::vector<ElasticHandover> handed;
  auto first = Generation(o, 2, {}, /*stop=*/true, &handed);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(first[r].status().code(), absl::StatusCode::kCancelled)
        << first[r].status();
    EXPECT_EQ(handed[r].committed_step, 1);
    ASSERT_FALSE(handed[r].committed_bytes.empty());
    // Replicas: the same state, byte for byte.
    EXPECT_EQ(handed[r].committed_bytes, handed[0].committed_bytes);
  }

  // Generation 1: 1 rank from rank 0's bytes, no directory read.
  TrainOptions next = o;
  next.checkpoint.checkpoint_dir = TempDir("elastic_next");
  ElasticHandover start;
  start.start_from_memory = true;
  start.start_bytes = handed[0].committed_bytes;
  std::vector<ElasticHandover> unused;
  std::ostringstream log;
  auto elastic = Generation(next, 1, start, /*stop=*/false, &unused, &log);
  ASSERT_TRUE(elastic[0].ok()) << elastic[0].status();
  EXPECT_THAT(log.str(),
              HasSubstr("this generation of 1 rank goes on from step 1"));
  // 384 examples, 32 of them in step 1 (2 ranks x 16): 352 left, in 22
  // steps of 16.
  EXPECT_EQ(elastic[0]->metrics.global_step, 1 + 22);

  // The reference: one rank resumed from the checkpoint at step 1.
  TrainOptions resumed = o;
  resumed.checkpoint.resume = true;
  auto reference = TrainOnRanks(resumed, 1);
  ASSERT_TRUE(reference[0].ok()) << reference[0].status();
  EXPECT_EQ(reference[0]->metrics.global_step, 1 + 22);
  ExpectSameParameters(*elastic[0], *reference[0]);
}

// Rank 1 fails in the middle of training: both ranks hand over the same
// state at the same committed step, and one rank goes on from it to the end
// of the epoch, every remaining example once.
TEST(ElasticHandoverTest, FailureMidTrainingHandsOverTheCommittedStep) {
  TrainOptions o = SmallRun();
  o.optim.epochs = 1;
  o.skip_validation = true;
  o.launch.timeout = absl::Seconds(3);
  std::vector<ElasticHandover> handed(2);
  // Rank 1's 8th allreduce, well into training (a step allreduces one
  // bucket), fails as if a peer had died.
  auto results = TrainOnRanks(
      o, 2,
      [&](int rank, TrainContext& context) { context.elastic = &handed[rank]; },
      [](int rank) { return rank == 1 ? 8 : 0; });
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(results[r].ok());
    EXPECT_GE(handed[r].committed_step, 1) << "rank " << r;
    EXPECT_EQ(handed[r].committed_step, handed[0].committed_step);
    EXPECT_EQ(handed[r].committed_bytes, handed[0].committed_bytes);
    // The datasets too, so that the next generation need not read them.
    ASSERT_TRUE(handed[r].data.has_value()) << "rank " << r;
  }
  const int64_t committed = handed[0].committed_step;
  TrainOptions next = o;
  ElasticHandover start;
  start.start_from_memory = true;
  start.start_bytes = handed[0].committed_bytes;
  start.data = handed[0].data;
  std::vector<int64_t> first_steps;
  start.first_step_committed = [&](int64_t step) {
    first_steps.push_back(step);
  };
  std::vector<ElasticHandover> unused;
  std::ostringstream log;
  auto rest = Generation(next, 1, start, /*stop=*/false, &unused, &log);
  ASSERT_TRUE(rest[0].ok()) << rest[0].status();
  // The kept datasets, not read again (reading says "data: ...").
  EXPECT_THAT(log.str(), Not(HasSubstr("data: ")));
  EXPECT_EQ(first_steps, std::vector<int64_t>{committed + 1});
  // 384 examples, 32 per committed step: the rest in steps of 16.
  EXPECT_EQ(rest[0]->metrics.epochs[0].samples, 384 - 32 * committed);
  EXPECT_EQ(rest[0]->metrics.global_step,
            committed + (384 - 32 * committed + 15) / 16);
}

// The state arrives while the model is built (await_start_bytes); a rank
// whose state never came fails with the transfer's error, and the others
// with one that says so, instead of waiting in the first collective.
TEST(ElasticHandoverTest, StateThatDidNotArriveFailsEveryRank) {
  TrainOptions o = SmallRun();
  o.optim.epochs = 1;
  o.skip_validation = true;
  std::vector<ElasticHandover> handed;
  auto first = Generation(o, 2, {}, /*stop=*/true, &handed);
  ASSERT_EQ(handed[0].committed_step, 1);
  const std::string state = handed[0].committed_bytes;

  std::vector<ElasticHandover> next(2);
  for (int r = 0; r < 2; ++r) {
    next[r].start_from_memory = true;
    next[r].await_start_bytes = [r, &state]() -> absl::StatusOr<std::string> {
      if (r == 1) return absl::UnavailableError("its source is gone");
      return state;
    };
  }
  auto results = TrainOnRanks(o, 2, [&](int rank, TrainContext& context) {
    context.elastic = &next[rank];
  });
  ASSERT_FALSE(results[1].ok());
  EXPECT_EQ(results[1].status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(results[1].status().message()),
              HasSubstr("its source is gone"));
  ASSERT_FALSE(results[0].ok());
  EXPECT_EQ(results[0].status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(std::string(results[0].status().message()),
              HasSubstr("1 rank could not load the state this generation "
                        "starts from"));
}

// A failure before any training hands nothing over.
TEST(ElasticHandoverTest, NothingToHandOverBeforeTraining) {
  TrainOptions o = SmallRun();
  o.data.data_dir = "/nonexistent/elastic";
  o.data.dataset = "mnist";
  std::vector<ElasticHandover> handed;
  auto results = Generation(o, 2, {}, /*stop=*/false, &handed);
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(results[r].ok());
    EXPECT_EQ(handed[r].committed_step, -1);
    EXPECT_TRUE(handed[r].committed_bytes.empty());
  }
}

}  // namespace
}  // namespace dtrain::trainer
