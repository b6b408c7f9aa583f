#include "models/model.h"

#include <torch/nn/module.h>
#include <torch/utils.h>

#include <memory>
#include <vector>

namespace dtrain::models {

int64_t NumParameters(const torch::nn::Module& module) {
  int64_t total = 0;
  for (const torch::Tensor& p : module.parameters()) total += p.numel();
  return total;
}

namespace internal {

void CopyModuleState(const torch::nn::Module& from, torch::nn::Module& to) {
  torch::NoGradGuard no_grad;
  const auto from_params = from.named_parameters();
  auto to_params = to.named_parameters();
  TORCH_INTERNAL_ASSERT(from_params.size() == to_params.size());
  for (const auto& item : from_params) {
    torch::Tensor& target = to_params[item.key()];
    target.copy_(item.value());
    target.set_requires_grad(item.value().requires_grad());
  }
  const auto from_buffers = from.named_buffers();
  auto to_buffers = to.named_buffers();
  TORCH_INTERNAL_ASSERT(from_buffers.size() == to_buffers.size());
  for (const auto& item : from_buffers) {
    to_buffers[item.key()].copy_(item.value());
  }
  // train() recurses, so set the root first and then each submodule in
  // pre-order. modules(/*include_self=*/true) would need a shared_ptr owner.
  to.train(from.is_training());
  const std::vector<std::shared_ptr<torch::nn::Module>> from_modules =
      from.modules(/*include_self=*/false);
  const std::vector<std::shared_ptr<torch::nn::Module>> to_modules =
      to.modules(/*include_self=*/false);
  TORCH_INTERNAL_ASSERT(from_modules.size() == to_modules.size());
  for (size_t i = 0; i < from_modules.size(); ++i) {
    to_modules[i]->train(from_modules[i]->is_training());
  }
}

}  // namespace internal
}  // namespace dtrain::models
