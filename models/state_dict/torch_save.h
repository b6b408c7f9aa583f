// The file format of PyTorch's torch.save (the default since PyTorch 1.6) for
// state_dicts: a zip archive (zip_archive.h) whose entries sit under one
// top-level folder: "data.pkl", the pickled dict of names to tensors
// (torch_pickle.h); "data/<key>", each storage's raw little-endian bytes;
// "version"; and, from PyTorch 2.x, "byteorder". Python's torch.load reads
// what EncodeTorchSave writes, with weights_only=True too; DecodeTorchSave
// reads what torch.save(model.state_dict()) writes, torchvision's weight
// files included. The format before PyTorch 1.6 (pickles and storages back
// to back, no zip; older model zoos') is read too. Like the safetensors codec
// this knows nothing of LibTorch.
//
// Decoding checks the archive, the pickle, that every tensor lies inside its
// storage and every storage has the bytes its pickle claims, and that names
// are unique; faults are errors naming the entry, never a crash.
//
// Thread safety: pure functions.
#ifndef DTRAIN_MODELS_STATE_DICT_TORCH_SAVE_H_
#define DTRAIN_MODELS_STATE_DICT_TORCH_SAVE_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "models/state_dict/safetensors.h"

namespace dtrain::models::state_dict {

// The archive's top-level folder for files this project writes (torch.save
// names it after the file; any name reads back).
inline constexpr absl::string_view kTorchSaveFolder = "archive";

// One storage per tensor, in the given order, contiguous. kInvalidArgument for
// an empty or duplicate name or data that does not match its shape.
absl::StatusOr<std::string> EncodeTorchSave(
    const std::vector<TensorEntry>& tensors);

// A file's tensors as PyTorch's torch.load sees them: each storage once, each
// tensor object once as a view of its storage (offset, sizes and strides in
// elements, checked to lie inside it), and the dict's names in order, each
// with its tensor's index: names sharing a storage (tied weights, views, or a
// hostile file's thousand names for one storage) share its bytes. Nothing is
// copied; storages view the caller's bytes. Memory is bounded by the input
// (torch_pickle.h's budget), however the names alias.
struct TorchSaveFile {
  struct Tensor {
    size_t storage = 0;  // Index into `storages`.
    Dtype dtype = Dtype::kF32;
    int64_t offset = 0;
    std::vector<int64_t> size;
    std::vector<int64_t> stride;
  };
  std::vector<absl::string_view> storages;
  std::vector<Tensor> tensors;
  std::vector<std::pair<std::string, size_t>> names;
};
absl::StatusOr<TorchSaveFile> ParseTorchSave(absl::string_view bytes);

// The state_dict's tensors in the dict's order, gathered row-major from
// their storages: views of one storage each get their own copy, so this
// refuses (kResourceExhausted) to copy out more than twice the file's bytes
// plus 1 MiB. For tests and small tools; loaders take ParseTorchSave's views.
absl::StatusOr<std::vector<TensorEntry>> DecodeTorchSave(
    absl::string_view bytes);

}  // namespace dtrain::models::state_dict

#endif  // DTRAIN_MODELS_STATE_DICT_TORCH_SAVE_H_
