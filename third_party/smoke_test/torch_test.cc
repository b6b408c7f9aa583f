// LibTorch smoke test: tensors, autograd and an nn module run with the LibTorch
// this build links.

#include <torch/torch.h>

#include "gtest/gtest.h"
#include "third_party/torch_config.h"

namespace {

TEST(TorchSmokeTest, AutogradComputesGradientOfPolynomial) {
  // d/dx sum(x^3 + 2x) = 3x^2 + 2.
  torch::Tensor x = torch::tensor({1.0f, -2.0f, 0.5f}, torch::requires_grad());
  torch::Tensor y = (x.pow(3) + 2 * x).sum();
  y.backward();
  torch::Tensor expected = torch::tensor({5.0f, 14.0f, 2.75f});
  EXPECT_TRUE(torch::allclose(x.grad(), expected)) << x.grad();
}

TEST(TorchSmokeTest, LinearLayerTrainsOneSgdStep) {
  torch::manual_seed(0);
  torch::nn::Linear layer(4, 1);
  torch::optim::SGD sgd(layer->parameters(), torch::optim::SGDOptions(0.1));
  torch::Tensor input = torch::ones({8, 4});
  torch::Tensor target = torch::zeros({8, 1});
  auto loss_of = [&] { return torch::mse_loss(layer->forward(input), target); };
  const float before = loss_of().item<float>();
  sgd.zero_grad();
  loss_of().backward();
  sgd.step();
  EXPECT_LT(loss_of().item<float>(), before);
}

TEST(TorchSmokeTest, ReportsWhichLibTorchIsLinked) {
  EXPECT_STRNE(DTRAIN_TORCH_ORIGIN, "");
  EXPECT_EQ(torch::cuda::is_available() && !DTRAIN_TORCH_HAS_CUDA, false)
      << "a CPU-only LibTorch cannot see CUDA devices";
}

}  // namespace
