#include "optim/lr_schedule.h"

#include <torch/optim/sgd.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "optim/adadelta.h"

namespace dtrain::optim {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

LrScheduleOptions StepOnly(StepLrOptions step) {
  LrScheduleOptions o;
  o.step = step;
  return o;
}

double GroupLr(const torch::optim::Optimizer& optimizer, size_t group) {
  return optimizer.param_groups()[group].options().get_lr();
}

// Python: 0.1 * (0.1 ** (epoch // 30)), as the tutorial's
// adjust_learning_rate computes it.
TEST(StepLearningRateTest, EqualsTheTutorialsFormulaBitForBit) {
  const StepLrOptions tutorial;
  EXPECT_EQ(tutorial.step_size, 30);
  EXPECT_EQ(tutorial.gamma, 0.1);
  EXPECT_EQ(StepLearningRate(0.1, 0, tutorial), 0.1);
  EXPECT_EQ(StepLearningRate(0.1, 29, tutorial), 0.1);
  EXPECT_EQ(StepLearningRate(0.1, 30, tutorial), 0.010000000000000002);
  EXPECT_EQ(StepLearningRate(0.1, 59, tutorial), 0.010000000000000002);
  EXPECT_EQ(StepLearningRate(0.1, 60, tutorial), 0.0010000000000000002);
  EXPECT_EQ(StepLearningRate(0.1, 89, tutorial), 0.0010000000000000002);
  EXPECT_EQ(StepLearningRate(0.1, 90, tutorial), 0.00010000000000000003);
  // PyTorch's MNIST example: StepLR(step_size=1, gamma=0.7).
  EXPECT_EQ(StepLearningRate(0.5, 3, {1, 0.7}), 0.17149999999999996);
}

TEST(LrScheduleTest, SetsEveryGroupFromItsOwnBase) {
  torch::Tensor a = torch::zeros({1}, torch::requires_grad());
  torch::Tensor b = torch::zeros({1}, torch::requires_grad());
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<torch::Tensor>{a});
  groups.emplace_back(std::vector<torch::Tensor>{b},
                      std::make_unique<torch::optim::SGDOptions>(0.02));
  torch::optim::SGD sgd(std::move(groups),
                        torch::optim::SGDOptions(0.1).momentum(0.9));
  absl::StatusOr<LrSchedule> schedule = LrSchedule::Create(sgd);
  ASSERT_TRUE(schedule.ok()) << schedule.status();
  EXPECT_THAT(schedule->base_lrs(), ElementsAre(0.1, 0.02));

  ASSERT_TRUE(schedule->SetEpoch(0).ok());
  EXPECT_EQ(GroupLr(sgd, 0), 0.1);
  EXPECT_EQ(GroupLr(sgd, 1), 0.02);
  ASSERT_TRUE(schedule->SetEpoch(30).ok());
  EXPECT_EQ(GroupLr(sgd, 0), StepLearningRate(0.1, 30, {}));
  EXPECT_DOUBLE_EQ(GroupLr(sgd, 1), 0.002);
  ASSERT_TRUE(schedule->SetEpoch(61).ok());
  EXPECT_DOUBLE_EQ(GroupLr(sgd, 0), 0.001);
  EXPECT_DOUBLE_EQ(schedule->LearningRate(61, 0, 1), 0.0002);
  // Going back is allowed: the rate depends on the epoch only.
  ASSERT_TRUE(schedule->SetEpoch(5).ok());
  EXPECT_EQ(GroupLr(sgd, 0), 0.1);
}

// A resumed job: the checkpoint's optimizer carries a decayed lr; the
// schedule, made before the load, still knows the base.
TEST(LrScheduleTest, ResumingAtAnEpochGivesTheUninterruptedRate) {
  torch::Tensor p = torch::zeros({1}, torch::requires_grad());
  Adadelta optimizer({p}, AdadeltaOptions(0.5));
  auto schedule =
      LrSchedule::Create(optimizer, StepOnly({/*step_size=*/10, 0.5}));
  ASSERT_TRUE(schedule.ok());
  optimizer.param_groups()[0].options().set_lr(0.0625);  // "loaded"
  ASSERT_TRUE(schedule->SetEpoch(25).ok());
  EXPECT_EQ(GroupLr(optimizer, 0), 0.125);
  EXPECT_EQ(
      static_cast<AdadeltaOptions&>(optimizer.param_groups()[0].options()).lr(),
      0.125);
}

TEST(LrScheduleTest, RejectsBadOptionsEpochsAndChangedGroups) {
  torch::Tensor p = torch::zeros({1}, torch::requires_grad());
  torch::optim::SGD sgd({p}, torch::optim::SGDOptions(0.1));
  struct Case {
    StepLrOptions options;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {{0, 0.1}, "step_size must be at least 1 epoch, got 0"},
           {{30, 0}, "gamma must be positive and finite, got 0"},
           {{30, -0.1}, "gamma"},
           {{30, std::nan("")}, "gamma"},
           {{30, INFINITY}, "gamma"}}) {
    auto schedule = LrSchedule::Create(sgd, StepOnly(c.options));
    EXPECT_EQ(schedule.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(schedule.status().message()), HasSubstr(c.message));
  }

  auto schedule = LrSchedule::Create(sgd);
  ASSERT_TRUE(schedule.ok());
  absl::Status status = schedule->SetEpoch(-1);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("got -1 and 0"));

  torch::Tensor q = torch::zeros({1}, torch::requires_grad());
  sgd.add_param_group(torch::optim::OptimizerParamGroup({q}));
  status = schedule->SetEpoch(1);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(status.message()), HasSubstr("2 parameter groups"));
}

TEST(LrScheduleTest, CosineFallsFromTheBaseToZeroPerStep) {
  LrScheduleOptions o;
  o.kind = LrScheduleKind::kCosine;
  o.epochs = 2;
  o.steps_per_epoch = 5;  // 10 steps in all
  ASSERT_TRUE(Validate(o).ok());
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(0.4, 0, 0, o), 0.4);
  // Half way (step 5 of 10): half the base.
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(0.4, 1, 0, o), 0.2);
  // torch.optim.lr_scheduler.CosineAnnealingLR(T_max=10) at step 2.
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(0.4, 0, 2, o),
                   0.2 * (1 + std::cos(M_PI * 2 / 10)));
  double previous = 1;
  for (int64_t s = 0; s < 10; ++s) {
    const double lr = ScheduledLearningRate(0.4, s / 5, s % 5, o);
    EXPECT_LT(lr, previous) << s;
    previous = lr;
  }
  // Past the end (a longer run than planned) it stays at 0.
  EXPECT_NEAR(ScheduledLearningRate(0.4, 3, 0, o), 0, 1e-12);
}

TEST(LrScheduleTest, WarmupRisesLinearlyThenHandsOver) {
  LrScheduleOptions o;
  o.kind = LrScheduleKind::kCosine;
  o.epochs = 4;
  o.steps_per_epoch = 2;
  o.warmup_epochs = 2;  // 4 warmup steps, then a cosine over 4 steps
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(1.0, 0, 0, o), 0.25);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(1.0, 0, 1, o), 0.5);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(1.0, 1, 1, o), 1.0);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(1.0, 2, 0, o), 1.0);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(1.0, 3, 0, o), 0.5);
  // With the step schedule: the warmup, then the tutorial's rates.
  o.kind = LrScheduleKind::kStep;
  o.step = {/*step_size=*/3, 0.1};
  o.warmup_epochs = 0.5;  // one step
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(1.0, 0, 0, o), 1.0);
  o.warmup_epochs = 1;
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(1.0, 0, 0, o), 0.5);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(1.0, 0, 1, o), 1.0);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(1.0, 3, 0, o), 0.1);
}

TEST(LrScheduleTest, SetStepIsAFunctionOfThePositionOnly) {
  torch::Tensor p = torch::zeros({1}, torch::requires_grad());
  torch::optim::SGD sgd({p}, torch::optim::SGDOptions(0.1));
  LrScheduleOptions o;
  o.kind = LrScheduleKind::kCosine;
  o.epochs = 3;
  o.steps_per_epoch = 7;
  o.warmup_epochs = 0.5;
  auto schedule = LrSchedule::Create(sgd, o);
  ASSERT_TRUE(schedule.ok()) << schedule.status();
  ASSERT_TRUE(schedule->SetStep(1, 4).ok());
  const double at_1_4 = GroupLr(sgd, 0);
  ASSERT_TRUE(schedule->SetStep(2, 6).ok());
  ASSERT_TRUE(schedule->SetStep(1, 4).ok());
  EXPECT_EQ(GroupLr(sgd, 0), at_1_4);
  EXPECT_EQ(schedule->LearningRate(1, 4), at_1_4);
}

TEST(LrScheduleTest, RejectsBadScheduleOptions) {
  struct Case {
    LrScheduleOptions options;
    std::string message;
  };
  std::vector<Case> cases(4);
  cases[0].options.epochs = 0;
  cases[0].message = "epochs must be at least 1, got 0";
  cases[1].options.steps_per_epoch = 0;
  cases[1].message = "steps per epoch must be at least 1";
  cases[2].options.warmup_epochs = -1;
  cases[2].message = "warmup_epochs must be >= 0";
  cases[3].options.kind = LrScheduleKind::kCosine;
  cases[3].options.epochs = 2;
  cases[3].options.warmup_epochs = 2;
  cases[3].message = "leaves nothing of the 2 epoch(s)";
  for (const Case& c : cases) {
    EXPECT_THAT(std::string(Validate(c.options).message()),
                HasSubstr(c.message));
  }
  EXPECT_EQ(*ParseLrScheduleKind("cosine"), LrScheduleKind::kCosine);
  EXPECT_THAT(std::string(ParseLrScheduleKind("linear").status().message()),
              HasSubstr("known: step, cosine"));
}

// Options that do not implement get_lr (OptimizerOptions' default throws).
struct NoLrOptions
    : public torch::optim::OptimizerCloneableOptions<NoLrOptions> {};

class NoLrOptimizer : public torch::optim::Optimizer {
 public:
  explicit NoLrOptimizer(std::vector<torch::Tensor> params)
      : Optimizer({torch::optim::OptimizerParamGroup(std::move(params))},
                  std::make_unique<NoLrOptions>()) {}
  torch::Tensor step(LossClosure) override { return {}; }
};

TEST(LrScheduleTest, RejectsOptimizersWithoutALearningRate) {
  NoLrOptimizer optimizer({torch::zeros({1})});
  auto schedule = LrSchedule::Create(optimizer);
  EXPECT_EQ(schedule.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(schedule.status().message()),
              HasSubstr("have no learning rate"));
}

}  // namespace
}  // namespace dtrain::optim
