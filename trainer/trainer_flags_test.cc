// The training flags of a practitioner's first hour, through Train with ranks
// as threads: gradient accumulation, learning-rate schedules with warmup,
// gradient clipping, bfloat16 autocast, float16 gradient compression and
// evaluation only. The step-level equivalences (accumulation against one big
// batch, clipping's bound) are in train_step_test.
#include <cmath>
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
using testing::SmallRun;
using testing::TempDir;
using testing::TrainOnRanks;

TEST(TrainerFlagsTest, AccumulationCountsOptimizerStepsAndResumesExactly) {
  TrainOptions o = SmallRun();  // 384 examples, batch 16: 24 batches
  o.optim.epochs = 1;
  o.skip_validation = true;
  o.optim.accumulate_steps = 5;  // 4 steps of 5 batches and one of 4
  std::ostringstream log;
  auto full = TrainOnRanks(o, 1, &log);
  ASSERT_TRUE(full[0].ok()) << full[0].status();
  EXPECT_EQ(full[0]->metrics.global_step, 5);
  EXPECT_EQ(full[0]->metrics.epochs[0].steps, 5);
  EXPECT_EQ(full[0]->metrics.epochs[0].samples, 384);
  EXPECT_THAT(log.str(), HasSubstr("5 per step: effective 80"));

  // Interrupted after 2 optimizer steps (10 batches), then resumed.
  TrainOptions part = o;
  part.checkpoint.checkpoint_dir = TempDir("accumulate_resume");
  part.optim.max_steps = 2;
  auto first = TrainOnRanks(part, 1);
  ASSERT_TRUE(first[0].ok()) << first[0].status();
  TrainOptions rest = o;
  rest.checkpoint.checkpoint_dir = part.checkpoint.checkpoint_dir;
  rest.checkpoint.resume = true;
  auto second = TrainOnRanks(rest, 1);
  ASSERT_TRUE(second[0].ok()) << second[0].status();
  EXPECT_EQ(second[0]->metrics.epochs[0].steps, 3);
  ExpectSameParameters(*second[0], *full[0]);

  // Two ranks stay identical.
  auto two = TrainOnRanks(o, 2);
  ASSERT_TRUE(two[0].ok() && two[1].ok());
  ExpectSameParameters(*two[0], *two[1]);
  EXPECT_EQ(two[0]->metrics.epochs[0].steps, 3);  // 12 batches per rank
}

TEST(TrainerFlagsTest, CosineScheduleWithWarmupSetsTheRatePerStep) {
  TrainOptions o = SmallRun();  // Adadelta, lr 0.5; 24 steps per epoch
  o.skip_validation = true;
  o.optim.lr_schedule = "cosine";
  o.optim.warmup_epochs = 0.5;  // 12 steps
  auto r = TrainOnRanks(o, 1);
  ASSERT_TRUE(r[0].ok()) << r[0].status();
  const RunMetrics& m = r[0]->metrics;
  ASSERT_EQ(m.epochs.size(), 2u);
  // Step 0 of the warmup: 1/12 of the base.
  EXPECT_DOUBLE_EQ(m.epochs[0].lr, 0.5 / 12);
  // Step 24: a third of the way through the 36 cosine steps.
  EXPECT_NEAR(m.epochs[1].lr, 0.5 * 0.5 * (1 + std::cos(M_PI / 3)), 1e-12);
  EXPECT_LT(m.epochs[1].train_loss, m.epochs[0].train_loss);
}

TEST(TrainerFlagsTest, ClippingAndBFloat16Train) {
  TrainOptions o = SmallRun();
  o.optim.clip_grad_norm = 0.5;
  o.optim.amp = "bf16";
  auto r = TrainOnRanks(o, 2);
  ASSERT_TRUE(r[0].ok()) << r[0].status();
  ASSERT_TRUE(r[1].ok()) << r[1].status();
  ExpectSameParameters(*r[0], *r[1]);
  const RunMetrics& m = r[0]->metrics;
  ASSERT_TRUE(m.epochs[0].grad_norm_mean.has_value());
  EXPECT_GT(*m.epochs[0].grad_norm_mean, 0);
  EXPECT_EQ(m.epochs[0].skipped_steps, 0);
  EXPECT_FALSE(m.epochs[0].loss_scale.has_value());  // bf16 needs none
  EXPECT_LT(m.epochs[1].train_loss, m.epochs[0].train_loss);
  EXPECT_GT(*m.epochs[1].val_top1, 50.0);
}

// How close float16 compression stays to float32 is DDP's to test
// (ddp_test); here the flag reaches DDP and the run trains. (Runs with ranks
// as threads share LibTorch's global generator, so two runs are not
// comparable number for number.)
TEST(TrainerFlagsTest, Float16AllreduceTrains) {
  TrainOptions o = SmallRun();
  o.parallel.comm_hook = "fp16";
  std::ostringstream log;
  auto half = TrainOnRanks(o, 2, &log);
  ASSERT_TRUE(half[0].ok()) << half[0].status();
  ASSERT_TRUE(half[1].ok()) << half[1].status();
  EXPECT_THAT(log.str(), HasSubstr("(float16 on the wire)"));
  ExpectSameParameters(*half[0], *half[1]);
  const RunMetrics& m = half[0]->metrics;
  EXPECT_LT(m.epochs[1].train_loss, m.epochs[0].train_loss);
  EXPECT_GT(*m.epochs[1].val_top1, 50.0);
}

// Post-local SGD: after its start step the ranks step on their own
// gradients and the averager brings their parameters together every period
// steps; a run whose last step is an averaging step ends with equal models.
TEST(TrainerFlagsTest, PostLocalSgdTrainsAndEndsAveraged) {
  TrainOptions o = SmallRun();
  o.parallel.comm_hook = "local_sgd";
  o.parallel.local_sgd_start_step = 2;
  o.parallel.local_sgd_period = 2;
  // The averager's calls 2 and 4 (counting from 0) are due: steps 3 and 5.
  o.optim.max_steps = 5;
  std::ostringstream log;
  auto runs = TrainOnRanks(o, 2, &log);
  ASSERT_TRUE(runs[0].ok()) << runs[0].status();
  ASSERT_TRUE(runs[1].ok()) << runs[1].status();
  EXPECT_THAT(log.str(), HasSubstr("post-local SGD from step 2"));
  ExpectSameParameters(*runs[0], *runs[1]);
  // Ending on a local step (4), the ranks' models differ.
  o.optim.max_steps = 4;
  runs = TrainOnRanks(o, 2, &log);
  ASSERT_TRUE(runs[0].ok()) << runs[0].status();
  ASSERT_TRUE(runs[1].ok()) << runs[1].status();
  const auto a = runs[0]->model->named_parameters();
  const auto b = runs[1]->model->named_parameters();
  bool differ = false;
  for (const auto& item : a) {
    differ = differ || !item.value().equal(b[item.key()]);
  }
  EXPECT_TRUE(differ);
}

// PowerSGD after two plain steps: the run trains, the ranks end identical
// (every rank applies the same approximation), and the log says so.
TEST(TrainerFlagsTest, PowerSgdTrains) {
  TrainOptions o = SmallRun();
  o.parallel.comm_hook = "powersgd";
  o.parallel.powersgd_rank = 2;
  o.parallel.powersgd_start_step = 2;
  std::ostringstream log;
  auto runs = TrainOnRanks(o, 2, &log);
  ASSERT_TRUE(runs[0].ok()) << runs[0].status();
  ASSERT_TRUE(runs[1].ok()) << runs[1].status();
  EXPECT_THAT(log.str(), HasSubstr("(PowerSGD rank 2 from step 2)"));
  ExpectSameParameters(*runs[0], *runs[1]);
  const RunMetrics& m = runs[0]->metrics;
  EXPECT_LT(m.epochs[1].train_loss, m.epochs[0].train_loss);
}

TEST(TrainerFlagsTest, EvaluateReportsWhatTheLastValidationReported) {
  TrainOptions o = SmallRun();
  o.optim.epochs = 1;
  o.checkpoint.checkpoint_dir = TempDir("evaluate");
  o.checkpoint.save_state_dict =
      o.checkpoint.checkpoint_dir + "/final.safetensors";
  auto trained = TrainOnRanks(o, 2);
  ASSERT_TRUE(trained[0].ok()) << trained[0].status();
  const EpochMetrics& last = trained[0]->metrics.epochs.back();

  TrainOptions from_weights = SmallRun();
  from_weights.evaluate = true;
  from_weights.model.init_state_dict = o.checkpoint.save_state_dict;
  std::ostringstream log;
  auto evaluated = TrainOnRanks(from_weights, 2, &log);
  ASSERT_TRUE(evaluated[0].ok()) << evaluated[0].status();
  const RunMetrics& m = evaluated[0]->metrics;
  ASSERT_EQ(m.epochs.size(), 1u);
  EXPECT_EQ(m.global_step, 0);
  EXPECT_EQ(*m.epochs[0].val_top1, *last.val_top1);
  EXPECT_DOUBLE_EQ(*m.epochs[0].val_loss, *last.val_loss);
  EXPECT_THAT(log.str(),
              HasSubstr("evaluation of " + o.checkpoint.save_state_dict));

  TrainOptions from_checkpoint = SmallRun();
  from_checkpoint.evaluate = true;
  from_checkpoint.checkpoint.checkpoint_dir = o.checkpoint.checkpoint_dir;
  from_checkpoint.checkpoint.resume = true;
  auto again = TrainOnRanks(from_checkpoint, 1);
  ASSERT_TRUE(again[0].ok()) << again[0].status();
  EXPECT_EQ(*again[0]->metrics.epochs[0].val_top1, *last.val_top1);

  from_checkpoint.checkpoint.checkpoint_dir = TempDir("evaluate_empty");
  auto nothing = TrainOnRanks(from_checkpoint, 1);
  ASSERT_FALSE(nothing[0].ok());
  EXPECT_THAT(std::string(nothing[0].status().message()),
              HasSubstr("--evaluate: no checkpoint in "));
}

}  // namespace
}  // namespace dtrain::trainer
