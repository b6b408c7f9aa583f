// The differences between the LibTorch versions the project builds against
// (1.13 on Debian 12, 2.6 on Debian 13, 2.14 on Debian testing), in one place.
// Each entry is chosen from what the installed headers declare, not from
// version numbers, so a LibTorch that is none of these still builds if its
// API matches one of them.
//
// Everything here is a header-only, stateless function: thread-safe wherever
// the LibTorch call it wraps is.
#ifndef DTRAIN_BASE_TORCH_COMPAT_H_
#define DTRAIN_BASE_TORCH_COMPAT_H_

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>

#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace dtrain::torch_compat {

// The map type of torch::optim::Optimizer::state(). Its key is a
// std::string holding the parameter's TensorImpl address in LibTorch 1.x and
// the address itself (void*) since 2.2.
using OptimizerStateMap = std::remove_reference_t<
    decltype(std::declval<torch::optim::Optimizer&>().state())>;
using OptimizerStateKey = OptimizerStateMap::key_type;

// The key under which LibTorch's optimizers (and ours, which derive from
// torch::optim::Optimizer) keep the state of `param`.
template <typename Key = OptimizerStateKey>
Key OptimizerStateKeyOf(const at::Tensor& param) {
  void* impl = param.unsafeGetTensorImpl();
  if constexpr (std::is_same_v<Key, std::string>) {
    // What LibTorch 1.x's c10::guts::to_string(TensorImpl*) writes.
    std::ostringstream out;
    out << impl;
    return out.str();
  } else {
    static_assert(std::is_same_v<Key, void*>,
                  "unknown optimizer state key type in this LibTorch");
    return impl;
  }
}

// LibTorch 2.14's Optimizer constructor (add_param_group) merges a group's
// own options with the defaults only for the optimizers LibTorch ships (SGD,
// Adam, ...); for any other, ours included, it keeps the defaults and drops
// the group's options. Call from a derived optimizer's constructor with the
// groups it was given: each group gets its own options back, as LibTorch 1.13
// to 2.6 kept them (there this changes nothing).
inline void KeepGroupOptions(
    const std::vector<torch::optim::OptimizerParamGroup>& given,
    std::vector<torch::optim::OptimizerParamGroup>& added) {
  for (size_t i = 0; i < given.size() && i < added.size(); ++i) {
    if (given[i].has_options()) {
      const torch::optim::OptimizerOptions& options = given[i].options();
      added[i].set_options(options.clone());
    }
  }
}

}  // namespace dtrain::torch_compat

#endif  // DTRAIN_BASE_TORCH_COMPAT_H_
