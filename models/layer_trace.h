// LayerTrace records, during one forward pass, each layer's output shape and
// parameter count: what a model summary prints. LibTorch's C++ modules have no
// forward hooks, so the models of this package report their layers themselves
// through TracedForward and LayerTrace::Begin/End; with a null trace they run
// the plain forward at the cost of one branch per layer.
//
// Not thread-safe: one trace belongs to one forward pass on one thread.
#ifndef DTRAIN_MODELS_LAYER_TRACE_H_
#define DTRAIN_MODELS_LAYER_TRACE_H_

#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/container/sequential.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace dtrain::models {

// One layer as run in the forward pass. A module run twice (torchvision's
// shared ReLU) appears once per run.
struct TracedLayer {
  // Dotted path from the model, as in named_modules() and the state_dict keys
  // ("layer1.0.conv1"); empty for the model itself.
  std::string path;
  // The module's C++ type without namespace and "Impl" ("Conv2d").
  std::string type;
  // 0 for the model, 1 for its children, and so on.
  int depth = 0;
  // Empty until the layer's forward returned.
  std::vector<int64_t> output_shape;
  // Parameters registered on this module itself, not on its children: a
  // leaf's total, and usually 0 for containers, so that the rows add up to
  // the model's total.
  int64_t num_params = 0;
};

class LayerTrace {
 public:
  // Opens a layer called `name` inside the innermost open layer (or as the
  // root when none is open). Returns a token to pass to End.
  int Begin(absl::string_view name, const torch::nn::Module& module);

  // Closes the innermost open layer, which must be the one `token` names.
  void End(int token, const torch::Tensor& output);

  // Rows in the order the layers were opened (pre-order).
  const std::vector<TracedLayer>& layers() const { return layers_; }

 private:
  std::vector<TracedLayer> layers_;
  std::vector<int> open_;  // indices into layers_, innermost last
};

// "torch::nn::Conv2dImpl" -> "Conv2d"; "ConvNet" -> "ConvNet".
std::string ModuleTypeName(const torch::nn::Module& module);

// Runs `module->forward(input)` for a module holder (torch::nn::Conv2d, ...),
// recorded as `name` when `trace` is not null.
template <typename ModuleHolder>
torch::Tensor TracedForward(LayerTrace* trace, absl::string_view name,
                            ModuleHolder& module, const torch::Tensor& input) {
  if (trace == nullptr) return module->forward(input);
  const int token = trace->Begin(name, *module);
  torch::Tensor output = module->forward(input);
  trace->End(token, output);
  return output;
}

// The same for a type-erased module (a model's norm_layer, norm_layer.h).
torch::Tensor TracedForward(LayerTrace* trace, absl::string_view name,
                            torch::nn::AnyModule& module,
                            const torch::Tensor& input);

// Records `module` as `name` around `forward()`, a callable that runs it and
// reports its own layers to `trace` (for blocks with a traced Forward).
template <typename ForwardFn>
torch::Tensor TracedNested(LayerTrace* trace, absl::string_view name,
                           const torch::nn::Module& module,
                           ForwardFn&& forward) {
  if (trace == nullptr) return forward();
  const int token = trace->Begin(name, module);
  torch::Tensor output = forward();
  trace->End(token, output);
  return output;
}

// Runs a Sequential of leaf modules, recording it as `name` and each of its
// modules under its index ("downsample.0").
torch::Tensor TracedSequential(LayerTrace* trace, absl::string_view name,
                               torch::nn::Sequential& sequential,
                               const torch::Tensor& input);

}  // namespace dtrain::models

#endif  // DTRAIN_MODELS_LAYER_TRACE_H_
