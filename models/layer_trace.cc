#include "models/layer_trace.h"

#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace dtrain::models {

std::string ModuleTypeName(const torch::nn::Module& module) {
  absl::string_view name = module.name();
  const size_t colon = name.rfind("::");
  if (colon != absl::string_view::npos) name.remove_prefix(colon + 2);
  if (name.size() > 4 && absl::EndsWith(name, "Impl")) name.remove_suffix(4);
  return std::string(name);
}

int LayerTrace::Begin(absl::string_view name, const torch::nn::Module& module) {
  TracedLayer layer;
  if (open_.empty()) {
    layer.path = std::string(name);
  } else {
    const TracedLayer& parent = layers_[open_.back()];
    layer.path = parent.path.empty() ? std::string(name)
                                     : absl::StrCat(parent.path, ".", name);
    layer.depth = parent.depth + 1;
  }
  layer.type = ModuleTypeName(module);
  for (const torch::Tensor& p : module.parameters(/*recurse=*/false)) {
    layer.num_params += p.numel();
  }
  layers_.push_back(std::move(layer));
  open_.push_back(static_cast<int>(layers_.size()) - 1);
  return open_.back();
}

void LayerTrace::End(int token, const torch::Tensor& output) {
  TORCH_INTERNAL_ASSERT(!open_.empty() && open_.back() == token,
                        "LayerTrace::End(", token,
                        ") does not close the innermost open layer");
  open_.pop_back();
  const torch::IntArrayRef sizes = output.sizes();
  layers_[token].output_shape.assign(sizes.begin(), sizes.end());
}

torch::Tensor TracedForward(LayerTrace* trace, absl::string_view name,
                            torch::nn::AnyModule& module,
                            const torch::Tensor& input) {
  if (trace == nullptr) return module.forward<torch::Tensor>(input);
  const int token = trace->Begin(name, *module.ptr());
  torch::Tensor output = module.forward<torch::Tensor>(input);
  trace->End(token, output);
  return output;
}

torch::Tensor TracedSequential(LayerTrace* trace, absl::string_view name,
                               torch::nn::Sequential& sequential,
                               const torch::Tensor& input) {
  if (trace == nullptr) return sequential->forward(input);
  const int token = trace->Begin(name, *sequential);
  torch::Tensor x = input;
  size_t index = 0;
  for (torch::nn::AnyModule& module : *sequential) {
    const int child = trace->Begin(std::to_string(index++), *module.ptr());
    x = module.forward(x);
    trace->End(child, x);
  }
  trace->End(token, x);
  return x;
}

}  // namespace dtrain::models
