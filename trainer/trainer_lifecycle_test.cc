// A run's life around its training steps, with ranks as threads: evaluation
// and weights out of a checkpoint on several ranks, resuming with another
// number of processes, stops that land at the next step boundary (also
// during validation), the validation sanity check before the first step,
// the checkpoint of an epoch written before its validation, and outputs that
// cannot be written refused before training.

#include <torch/nn/modules/linear.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dist/backend/backend_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/model.h"
#include "models/registry.h"
#include "models/state_dict/state_dict.h"
#include "trainer/trainer.h"
#include "trainer/trainer_testing.h"

namespace dtrain::trainer {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

using testing::ExpectSameParameters;
using testing::Gloo;
using testing::SmallRun;
using testing::TempDir;
using testing::TrainOnRanks;

// What the probe model does on the thread (= rank) that runs it: raise this
// rank's stop flag during its n-th training or evaluation forward (a signal
// arriving in the middle of a step), or fail an evaluation forward.
struct Probe {
  std::atomic<bool>* stop = nullptr;
  int stop_at_train_forward = 0;  // 1-based; 0: never
  int stop_at_eval_forward = 0;
  bool fail_eval = false;
  int train_forwards = 0;
  int eval_forwards = 0;
};
thread_local Probe probe;

// A linear classifier that consults `probe` in every forward.
class ProbeModel : public models::Model {
 public:
  ProbeModel(int64_t in_features, int64_t num_classes) : Model("ProbeModel") {
    fc_ = register_module("fc", torch::nn::Linear(in_features, num_classes));
  }
  torch::Tensor Forward(const torch::Tensor& input,
                        models::LayerTrace*) override {
    if (is_training()) {
      if (++probe.train_forwards == probe.stop_at_train_forward)
        probe.stop->store(true);
    } else {
      TORCH_CHECK(!probe.fail_eval, "probe: evaluation refused");
      if (++probe.eval_forwards == probe.stop_at_eval_forward)
        probe.stop->store(true);
    }
    return fc_->forward(input.flatten(1));
  }

 private:
  torch::nn::Linear fc_{nullptr};
};

const models::ModelRegistration kProbe(
    {"probe", "a linear model that raises stop flags on cue", 10, {1, 12, 12}},
    [](const models::ModelConfig& c)
        -> absl::StatusOr<std::shared_ptr<models::Model>> {
      return std::make_shared<ProbeModel>(
          *c.in_channels * *c.image_size * *c.image_size, *c.num_classes);
    });

// Trains on `world_size` rank threads, each with its own stop flag and the
// probe set up by `setup(rank, probe)`. Rank 0 logs to `log`.
std::vector<absl::StatusOr<TrainResult>> TrainProbed(
    const TrainOptions& o, int world_size,
    const std::function<void(int, Probe&)>& setup, std::ostream* log) {
  std::vector<absl::StatusOr<TrainResult>> results(
      world_size, absl::UnknownError("rank did not run"));
  std::vector<std::atomic<bool>> stop(world_size);
  backend::testing::RunRanks(world_size, Gloo, [&](backend::Backend& b) {
    probe = Probe();
    probe.stop = &stop[b.rank()];
    setup(b.rank(), probe);
    rendezvous::World world;
    world.rank = b.rank();
    world.world_size = b.size();
    TrainContext context;
    std::ostringstream quiet;
    context.log = b.rank() == 0 && log != nullptr ? log : &quiet;
    context.stop_requested = &stop[b.rank()];
    results[b.rank()] = Train(o, world, b, context);
  });
  return results;
}

TrainOptions ProbeRun() {
  TrainOptions o = SmallRun();
  o.model.name = "probe";
  o.num_sanity_val_steps = 0;
  return *ResolveDefaults(o);
}

TEST(TrainerLifecycleTest, EvaluatesTheNewestCheckpointOnTwoRanksAndSavesIt) {
  TrainOptions o = SmallRun();
  o.optim.epochs = 1;
  o.optim.max_steps = 5;
  o.skip_validation = true;
  o.checkpoint.checkpoint_dir = TempDir("evaluate2");
  auto trained = TrainOnRanks(o, 2);
  ASSERT_TRUE(trained[0].ok()) << trained[0].status();

  TrainOptions e = SmallRun();
  e.checkpoint.checkpoint_dir = o.checkpoint.checkpoint_dir;
  e.checkpoint.resume = true;
  e.evaluate = true;
  e.checkpoint.save_state_dict =
      o.checkpoint.checkpoint_dir + "/weights.safetensors";
  std::ostringstream log;
  auto evaluated = TrainOnRanks(e, 2, &log);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(evaluated[r].ok()) << evaluated[r].status();
    ASSERT_EQ(evaluated[r]->metrics.epochs.size(), 1u);
    EXPECT_TRUE(evaluated[r]->metrics.epochs[0].val_top1.has_value());
  }
  EXPECT_THAT(log.str(), HasSubstr("evaluation of"));
  // The checkpoint's weights, in PyTorch's format.
  models::ModelConfig config;
  config.image_size = 12;
  config.in_channels = 1;
  std::shared_ptr<models::Model> reread =
      *models::CreateModel("convnet", config);
  ASSERT_TRUE(
      models::state_dict::LoadStateDict(e.checkpoint.save_state_dict, *reread)
          .ok());
  TrainResult from_file{trained[0]->metrics, reread};
  ExpectSameParameters(from_file, *trained[0]);
}

TEST(TrainerLifecycleTest, ResumesAtAnEpochBoundaryWithFewerProcesses) {
  TrainOptions o = SmallRun();
  o.optim.epochs = 1;
  o.skip_validation = true;
  o.checkpoint.checkpoint_dir = TempDir("fewer_boundary");
  ASSERT_TRUE(TrainOnRanks(o, 2)[0].ok());

  TrainOptions rest = o;
  rest.optim.epochs = 2;
  rest.checkpoint.resume = true;
  std::ostringstream log;
  auto resumed = TrainOnRanks(rest, 1, &log);
  ASSERT_TRUE(resumed[0].ok()) << resumed[0].status();
  EXPECT_THAT(log.str(),
              HasSubstr("saved by 2 processes at an epoch boundary"));
  ASSERT_EQ(resumed[0]->metrics.epochs.size(), 1u);
  // Epoch 2 in full on one process: 384 examples in 24 steps.
  EXPECT_EQ(resumed[0]->metrics.epochs[0].samples, 384);
  EXPECT_EQ(resumed[0]->metrics.epochs[0].steps, 24);
  EXPECT_EQ(resumed[0]->metrics.global_step, 12 + 24);
}

TEST(TrainerLifecycleTest, ResumesInsideAnEpochWithMoreProcesses) {
  // One process stops after 6 of its 24 steps (96 of 384 examples)...
  TrainOptions o = SmallRun();
  o.optim.epochs = 1;
  o.skip_validation = true;
  o.optim.max_steps = 6;
  o.checkpoint.checkpoint_dir = TempDir("more_inside");
  ASSERT_TRUE(TrainOnRanks(o, 1)[0].ok());

  // ... and two go on with the 288 examples left, 144 each in 9 steps.
  TrainOptions rest = o;
  rest.optim.max_steps = 0;
  rest.checkpoint.resume = true;
  std::ostringstream log;
  auto resumed = TrainOnRanks(rest, 2, &log);
  ASSERT_TRUE(resumed[0].ok()) << resumed[0].status();
  ASSERT_TRUE(resumed[1].ok()) << resumed[1].status();
  EXPECT_THAT(log.str(),
              HasSubstr("the 288 examples it had left are re-partitioned "
                        "over 2 processes"));
  EXPECT_EQ(resumed[0]->metrics.epochs[0].samples, 288);
  EXPECT_EQ(resumed[0]->metrics.epochs[0].steps, 9);
  EXPECT_EQ(resumed[0]->metrics.global_step, 6 + 9);
  ExpectSameParameters(*resumed[0], *resumed[1]);
}

TEST(TrainerLifecycleTest, SaysWhenAResumedRunHasNothingLeftAndStillSaves) {
  TrainOptions o = SmallRun();
  o.optim.epochs = 1;
  o.skip_validation = true;
  o.checkpoint.checkpoint_dir = TempDir("nothing_left");
  auto trained = TrainOnRanks(o, 1);
  ASSERT_TRUE(trained[0].ok());
  TrainOptions again = o;
  again.checkpoint.resume = true;
  again.checkpoint.save_state_dict = o.checkpoint.checkpoint_dir + "/w.pt";
  std::ostringstream log;
  auto resumed = TrainOnRanks(again, 1, &log);
  ASSERT_TRUE(resumed[0].ok()) << resumed[0].status();
  EXPECT_THAT(log.str(), HasSubstr("nothing left to train"));
  EXPECT_THAT(log.str(), HasSubstr("raise --epochs"));
  EXPECT_TRUE(std::filesystem::exists(again.checkpoint.save_state_dict));
}

TEST(TrainerLifecycleTest, SignalDuringAStepStopsAtItsEnd) {
  TrainOptions o = ProbeRun();
  o.checkpoint.checkpoint_dir = TempDir("stop_mid_step");
  // Rank 1 is signalled during its 5th step; rank 0 learns it by the vote.
  auto results = TrainProbed(
      o, 2,
      [](int rank, Probe& p) {
        if (rank == 1) p.stop_at_train_forward = 5;
      },
      nullptr);
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(results[r].ok());
    EXPECT_EQ(results[r].status().code(), absl::StatusCode::kCancelled);
    EXPECT_THAT(results[r].status().message(), HasSubstr("at step 5;"));
  }
  EXPECT_TRUE(std::filesystem::exists(o.checkpoint.checkpoint_dir +
                                      "/checkpoint-000000005.dtc"));
}

TEST(TrainerLifecycleTest, SignalInAnEpochsLastStepSkipsItsValidation) {
  TrainOptions o = ProbeRun();
  o.checkpoint.checkpoint_dir = TempDir("stop_last_step");
  std::ostringstream log;
  // 12 steps per epoch on 2 ranks: the signal comes during the 12th.
  auto results = TrainProbed(
      o, 2,
      [](int rank, Probe& p) {
        if (rank == 0) p.stop_at_train_forward = 12;
      },
      &log);
  ASSERT_EQ(results[0].status().code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(results[0].status().message(), HasSubstr("at step 12;"));
  EXPECT_THAT(log.str(), Not(HasSubstr("* validation")));
  // The epoch ended: its checkpoint starts the next one.
  EXPECT_TRUE(std::filesystem::exists(o.checkpoint.checkpoint_dir +
                                      "/checkpoint-000000012.dtc"));
}

TEST(TrainerLifecycleTest, SignalDuringValidationStopsItWithTheEpochSaved) {
  TrainOptions o = ProbeRun();
  o.checkpoint.checkpoint_dir = TempDir("stop_validation");
  std::ostringstream log;
  auto results = TrainProbed(
      o, 2,
      [](int rank, Probe& p) {
        if (rank == 1) p.stop_at_eval_forward = 1;
      },
      &log);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(results[r].status().code(), absl::StatusCode::kCancelled)
        << results[r].status();
  }
  EXPECT_THAT(log.str(),
              HasSubstr("validation of epoch 1 stopped by a signal"));
  EXPECT_THAT(log.str(), Not(HasSubstr("* validation")));
  // Written before the validation began.
  EXPECT_TRUE(std::filesystem::exists(o.checkpoint.checkpoint_dir +
                                      "/checkpoint-000000012.dtc"));
  EXPECT_FALSE(
      std::filesystem::exists(o.checkpoint.checkpoint_dir + "/best.dtc"));

  // The resumed run goes on with epoch 2.
  TrainOptions rest = o;
  rest.checkpoint.resume = true;
  const auto leave_alone = [](int, Probe&) {};
  auto resumed = TrainProbed(rest, 2, leave_alone, nullptr);
  ASSERT_TRUE(resumed[0].ok()) << resumed[0].status();
  EXPECT_EQ(resumed[0]->metrics.epochs.size(), 1u);
  EXPECT_EQ(resumed[0]->metrics.global_step, 24);
}

TEST(TrainerLifecycleTest, FailingValidationIsFoundBeforeTheFirstStep) {
  TrainOptions o = ProbeRun();
  o.num_sanity_val_steps = 2;
  o.checkpoint.checkpoint_dir = TempDir("sanity");
  const auto fail_eval = [](int, Probe& p) { p.fail_eval = true; };
  auto results = TrainProbed(o, 2, fail_eval, nullptr);
  ASSERT_FALSE(results[0].ok());
  EXPECT_THAT(results[0].status().message(),
              HasSubstr("validation sanity check"));
  EXPECT_THAT(results[0].status().message(),
              HasSubstr("probe: evaluation refused"));
  EXPECT_TRUE(std::filesystem::is_empty(o.checkpoint.checkpoint_dir));

  // Passing, it says so and changes nothing of the training.
  TrainOptions fine = SmallRun();
  fine.optim.epochs = 1;
  fine.num_sanity_val_steps = 2;
  std::ostringstream log;
  auto checked = TrainOnRanks(fine, 1, &log);
  fine.num_sanity_val_steps = 0;
  auto unchecked = TrainOnRanks(fine, 1);
  ASSERT_TRUE(checked[0].ok() && unchecked[0].ok());
  EXPECT_THAT(log.str(), HasSubstr("validation sanity check: 2 batches"));
  ExpectSameParameters(*checked[0], *unchecked[0]);
}

TEST(TrainerLifecycleTest, UnwritableOutputsAreRefusedBeforeTraining) {
  const std::string dir = TempDir("unwritable");
  TrainOptions o = SmallRun();
  o.checkpoint.save_state_dict = dir + "/missing/w.pt";
  std::ostringstream log;
  auto results = TrainOnRanks(o, 1, &log);
  ASSERT_FALSE(results[0].ok());
  EXPECT_THAT(
      results[0].status().message(),
      HasSubstr("--save_state_dict: cannot write " + dir + "/missing/w.pt"));
  EXPECT_THAT(log.str(), Not(HasSubstr("epoch 1:")));

  TrainOptions m = SmallRun();
  m.report.metrics_json = dir;  // a directory
  EXPECT_THAT(TrainOnRanks(m, 1)[0].status().message(),
              HasSubstr("--metrics_json: cannot write"));

  // Rank 0's log only: the other ranks check nothing. With "{rank}", every
  // rank checks its own.
  TrainOptions log0 = SmallRun();
  log0.optim.epochs = 1;
  log0.optim.max_steps = 1;
  log0.report.log_jsonl = dir + "/log.jsonl";
  auto logged = TrainOnRanks(log0, 2);
  EXPECT_TRUE(logged[0].ok() && logged[1].ok()) << logged[1].status();
  log0.report.log_jsonl = dir + "/none/log.{rank}.jsonl";
  auto refused = TrainOnRanks(log0, 2);
  for (int r = 0; r < 2; ++r) {
    EXPECT_THAT(refused[r].status().message(),
                HasSubstr(absl::StrCat("--log_jsonl: cannot write ", dir,
                                       "/none/log.", r, ".jsonl")));
  }
}

}  // namespace
}  // namespace dtrain::trainer
