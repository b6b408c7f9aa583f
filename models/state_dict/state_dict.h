// A module's state_dict (its parameters and buffers by dotted name, as
// PyTorch's Module.state_dict() names and orders them) moved to and from the
// files PyTorch users exchange, chosen by extension: `.safetensors`
// (safetensors.h) and `.pt`/`.pth`, torch.save's format (torch_save.h).
// Other extensions are refused naming the supported ones.
//
// Loading is strict by default, as load_state_dict(strict=True): every name
// of the module must be in the file with the same shape and dtype, and the
// file must hold nothing else; otherwise kInvalidArgument naming what is
// missing, unexpected and mismatched, and the module is left untouched.
// LoadOptions relaxes this as strict=False does (missing and unexpected names
// allowed and reported; a shape or dtype mismatch still refused), and leaves
// out named entries, say a classifier head to be trained from scratch.
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

// How strictly entries are matched to the module, and which to leave out.
struct LoadOptions {
  // false: as load_state_dict(strict=False), the module's names missing from
  // the file keep their values and the file's names not in the module are
  // ignored, both reported. Shapes and dtypes must match either way (PyTorch
  // too refuses a size mismatch with strict=False).
  bool strict = true;
  // Names or prefixes left out on both sides: the module's entries keep their
  // values, the file's are ignored, and neither is checked. "fc" covers "fc"
  // and "fc.weight", "fc.bias", not "fc2.weight"; "fc." covers the names
  // that start with it. A pattern that covers no name of the file or the
  // module is an error naming it (a typo must not leave out nothing).
  std::vector<std::string> exclude;
  // How the caller's users spell `strict` and `exclude` (a program's flags,
  // say), for the hints in errors; empty: no hint.
  std::string strict_flag;
  std::string exclude_flag;
};

// What a load did, names in the module's order (the file's for `skipped`
// and `unexpected`).
struct LoadReport {
  std::vector<std::string> loaded;      // copied from the file
  std::vector<std::string> excluded;    // the module's, left out: values kept
  std::vector<std::string> skipped;     // the file's, left out
  std::vector<std::string> missing;     // not in the file: values kept
  std::vector<std::string> unexpected;  // not in the module: ignored

  // "120 of 122 entries loaded; left out (kept as initialised): fc.weight,
  // fc.bias", naming at most 8 of each kind.
  std::string Summary() const;
};

// Copies the entries into the module (see the strictness above); on an error
// the module is left untouched.
absl::StatusOr<LoadReport> LoadEntries(const std::vector<TensorEntry>& entries,
                                       torch::nn::Module& module,
                                       const LoadOptions& options);
// Strictly, leaving nothing out.
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
absl::StatusOr<LoadReport> LoadStateDict(const std::string& path,
                                         torch::nn::Module& module,
                                         const LoadOptions& options);

}  // namespace dtrain::models::state_dict

#endif  // DTRAIN_MODELS_STATE_DICT_STATE_DICT_H_
