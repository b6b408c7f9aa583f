#include "trainer/checkpoint/optimizer_state_bytes.h"

#include <ATen/core/Tensor.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/torch_compat.h"
#include "trainer/checkpoint/optimizer_codec.h"

namespace dtrain::trainer {

absl::StatusOr<int64_t> OptimizerStateBytes(
    const torch::optim::Optimizer& optimizer) {
  const internal::OptimizerCodec* codec = internal::CodecFor(optimizer);
  if (codec == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer state size: the checkpoint format supports ",
        internal::SupportedOptimizers(), ", and the optimizer is neither"));
  }
  int64_t bytes = 0;
  for (const auto& group : optimizer.param_groups()) {
    for (const at::Tensor& param : group.params()) {
      auto it =
          optimizer.state().find(torch_compat::OptimizerStateKeyOf(param));
      if (it == optimizer.state().end()) continue;
      DTRAIN_ASSIGN_OR_RETURN(internal::SavedParamState state,
                              codec->Extract(it->second.get(), "a parameter"));
      for (const at::Tensor& t : state.tensors) bytes += t.nbytes();
    }
  }
  return bytes;
}

}  // namespace dtrain::trainer
