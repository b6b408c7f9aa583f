// Model: the base of every network in this package (ConvNet, ResNet18). It is
// a torch::nn::Module with one tensor-to-tensor forward, which the trainer, DDP
// and the benchmarks call, and a traced forward for model summaries.
//
// Thread safety as for any torch::nn::Module: concurrent forwards of one model
// are safe in eval mode; training mutates batch-norm statistics and gradients.
#ifndef DTRAIN_MODELS_MODEL_H_
#define DTRAIN_MODELS_MODEL_H_

#include <torch/nn/module.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "models/layer_trace.h"

namespace dtrain::models {

class Model : public torch::nn::Module {
 public:
  // Named `forward` so that torch::nn::AnyModule and ModuleHolder find it.
  torch::Tensor forward(const torch::Tensor& input) {
    return Forward(input, nullptr);
  }

  // The forward pass; reports each layer to `trace` unless it is null. Throws
  // c10::Error, naming the expected shape, for input the model cannot take.
  virtual torch::Tensor Forward(const torch::Tensor& input,
                                LayerTrace* trace) = 0;

 protected:
  explicit Model(std::string name) : torch::nn::Module(std::move(name)) {}
};

// Number of elements in the module's parameters, its children's included.
int64_t NumParameters(const torch::nn::Module& module);

namespace internal {
// Copies parameters, buffers, requires_grad and each submodule's training
// mode from `from` into `to`, which must have the same structure.
void CopyModuleState(const torch::nn::Module& from, torch::nn::Module& to);
}  // namespace internal

// Gives a model a working clone(): a new model built from the same options
// with copies of the parameters and buffers (torch::nn::Cloneable needs a
// reset() that rebuilds every layer, which these models do not have). Like
// Cloneable, building the copy draws from the global generator.
//
// Derived needs a constructor from its options and an options() accessor.
template <typename Derived>
class CloneableModel : public Model {
 public:
  std::shared_ptr<torch::nn::Module> clone(
      const torch::optional<torch::Device>& device =
          torch::nullopt) const override {
    const auto& self = static_cast<const Derived&>(*this);
    auto copy = std::make_shared<Derived>(self.options());
    internal::CopyModuleState(*this, *copy);
    if (device.has_value()) copy->to(*device);
    return copy;
  }

 protected:
  using Model::Model;
};

}  // namespace dtrain::models

#endif  // DTRAIN_MODELS_MODEL_H_
