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

TEST(StepLrScheduleTest, SetsEveryGroupFromItsOwnBase) {
  torch::Tensor a = torch::zeros({1}, torch::requires_grad());
  torch::Tensor b = torch::zeros({1}, torch::requires_grad());
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<torch::Tensor>{a});
  groups.emplace_back(std::vector<torch::Tensor>{b},
                      std::make_unique<torch::optim::SGDOptions>(0.02));
  torch::optim::SGD sgd(std::move(groups),
                        torch::optim::SGDOptions(0.1).momentum(0.9));
  absl::StatusOr<StepLrSchedule> schedule = StepLrSchedule::Create(sgd);
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
  EXPECT_DOUBLE_EQ(schedule->LearningRate(61, 1), 0.0002);
  // Going back is allowed: the rate depends on the epoch only.
  ASSERT_TRUE(schedule->SetEpoch(5).ok());
  EXPECT_EQ(GroupLr(sgd, 0), 0.1);
}

// A resumed job: the checkpoint's optimizer carries a decayed lr; the
// schedule, made before the load, still knows the base.
TEST(StepLrScheduleTest, ResumingAtAnEpochGivesTheUninterruptedRate) {
  torch::Tensor p = torch::zeros({1}, torch::requires_grad());
  Adadelta optimizer({p}, AdadeltaOptions(0.5));
  auto schedule = StepLrSchedule::Create(optimizer, {/*step_size=*/10, 0.5});
  ASSERT_TRUE(schedule.ok());
  optimizer.param_groups()[0].options().set_lr(0.0625);  // "loaded"
  ASSERT_TRUE(schedule->SetEpoch(25).ok());
  EXPECT_EQ(GroupLr(optimizer, 0), 0.125);
  EXPECT_EQ(
      static_cast<AdadeltaOptions&>(optimizer.param_groups()[0].options()).lr(),
      0.125);
}

TEST(StepLrScheduleTest, RejectsBadOptionsEpochsAndChangedGroups) {
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
    auto schedule = StepLrSchedule::Create(sgd, c.options);
    EXPECT_EQ(schedule.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(schedule.status().message()), HasSubstr(c.message));
  }

  auto schedule = StepLrSchedule::Create(sgd);
  ASSERT_TRUE(schedule.ok());
  absl::Status status = schedule->SetEpoch(-1);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("got -1"));

  torch::Tensor q = torch::zeros({1}, torch::requires_grad());
  sgd.add_param_group(torch::optim::OptimizerParamGroup({q}));
  status = schedule->SetEpoch(1);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(status.message()), HasSubstr("2 parameter groups"));
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

TEST(StepLrScheduleTest, RejectsOptimizersWithoutALearningRate) {
  NoLrOptimizer optimizer({torch::zeros({1})});
  auto schedule = StepLrSchedule::Create(optimizer);
  EXPECT_EQ(schedule.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(schedule.status().message()),
              HasSubstr("have no learning rate"));
}

}  // namespace
}  // namespace dtrain::optim
