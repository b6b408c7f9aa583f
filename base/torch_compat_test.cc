#include "base/torch_compat.h"

#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <memory>
#include <vector>

namespace dtrain::torch_compat {
namespace {

// The key must be the one LibTorch's own optimizers use, or restored state
// would be silently ignored: check it against what SGD stores after a step.
TEST(TorchCompatTest, OptimizerStateKeyMatchesLibTorchsOwn) {
  torch::nn::Linear linear(3, 2);
  torch::optim::SGD sgd(linear->parameters(),
                        torch::optim::SGDOptions(0.1).momentum(0.9));
  linear->forward(torch::ones({4, 3})).sum().backward();
  sgd.step();
  ASSERT_EQ(sgd.state().size(), linear->parameters().size());
  for (const at::Tensor& param : linear->parameters()) {
    EXPECT_EQ(sgd.state().count(OptimizerStateKeyOf(param)), 1u);
  }
}

TEST(TorchCompatTest, DistinctParametersHaveDistinctKeys) {
  at::Tensor a = torch::zeros({2});
  at::Tensor b = torch::zeros({2});
  EXPECT_NE(OptimizerStateKeyOf(a), OptimizerStateKeyOf(b));
  at::Tensor same = a;  // another handle to the same TensorImpl
  EXPECT_EQ(OptimizerStateKeyOf(a), OptimizerStateKeyOf(same));
}

// A group's own options survive, as LibTorch 1.13-2.6 kept them for every
// optimizer; a group given without options keeps what it was given.
TEST(TorchCompatTest, KeepGroupOptionsRestoresEachGroupsOwnOptions) {
  using torch::optim::OptimizerParamGroup;
  using torch::optim::SGDOptions;
  std::vector<OptimizerParamGroup> given;
  given.emplace_back(std::vector<at::Tensor>{torch::zeros({2})},
                     std::make_unique<SGDOptions>(SGDOptions(0.5)));
  given.emplace_back(std::vector<at::Tensor>{torch::zeros({2})});
  // What LibTorch 2.14's constructor leaves for an optimizer it does not
  // know: the defaults everywhere.
  std::vector<OptimizerParamGroup> added;
  for (const OptimizerParamGroup& g : given) {
    added.emplace_back(g.params(),
                       std::make_unique<SGDOptions>(SGDOptions(0.1)));
  }
  KeepGroupOptions(given, added);
  EXPECT_EQ(added[0].options().get_lr(), 0.5);
  EXPECT_EQ(added[1].options().get_lr(), 0.1);
  // A copy, not the given object.
  given[0].options().set_lr(0.7);
  EXPECT_EQ(added[0].options().get_lr(), 0.5);
}

}  // namespace
}  // namespace dtrain::torch_compat
