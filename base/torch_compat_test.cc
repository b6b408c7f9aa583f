#include "base/torch_compat.h"

#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

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

}  // namespace
}  // namespace dtrain::torch_compat
