// A module's state_dict (its parameters and buffers by dotted name, as
// PyTorch's Module.state_dict() names and orders them) moved to and from the
// files PyTorch users exchange, chosen by extension: `.safetensors`
// (safetensors.h) and `.pt`/`.pth`, torch.save's format (torch_save.h).
// Other extensions are refused naming the supported ones.
//
// Loading is strict, as load_state_dict(strict=True): every name of the
// module must be in the file with the same shape and dtype, and the file must
// hold nothing else; otherwise kInvalidArgument naming what is missing,
// unexpected and mismatched, and the module is left untouched.
//
// Thread safety: as for the module; do not train it meanwhile.
#ifndef DTRAIN_MODELS_STATE_DICT_STATE_DICT_H_
#define DTRAIN_MODELS_STATE_DICT_STATE_DICT_H_

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "models/state_dict/safetensors.h"
#include "models/state_dict/state_dict_path.h"

namespace dtrain::models::state_dict {

// Parameters then buffers of each module, modules in registration order
// (pre-order), as PyTorch's state_dict(): "conv1.weight", "bn1.running_mean",
// "bn1.num_batches_tracked", "layer1.0.conv1.weight", ...
std::vector<std::pair<std::string, at::Tensor>> NamedState(
    const torch::nn::Module& module);

// The module's state as format-neutral entries in NamedState's order (CPU
// copies), or kInvalidArgument for a dtype the formats have no name for.
absl::StatusOr<std::vector<TensorEntry>> StateEntries(
    const torch::nn::Module& module);

// Copies the entries into the module (see the strictness above).
absl::Status LoadEntries(const std::vector<TensorEntry>& entries,
                         torch::nn::Module& module);

// Named tensors to and from a file (as safetensors.torch.save_file and
// load_file, or torch.save and torch.load of a dict of tensors), by the
// extension of `path`; loaded tensors are on the CPU. Writing is atomic (a
// temporary renamed over `path`). Errors name the path.
absl::Status SaveTensors(
    const std::vector<std::pair<std::string, at::Tensor>>& tensors,
    const std::string& path);
absl::StatusOr<std::vector<std::pair<std::string, at::Tensor>>> LoadTensors(
    const std::string& path);

// A module's state_dict through SaveTensors and LoadTensors' formats. Writing
// is atomic (a temporary renamed over `path`). Errors name the path.
absl::Status SaveStateDict(const torch::nn::Module& module,
                           const std::string& path);
absl::Status LoadStateDict(const std::string& path, torch::nn::Module& module);

}  // namespace dtrain::models::state_dict

#endif  // DTRAIN_MODELS_STATE_DICT_STATE_DICT_H_
