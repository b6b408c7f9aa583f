// The pickle inside a torch.save file (its data.pkl), for state_dicts only: a
// dict (or collections.OrderedDict) from names to tensors, each tensor
// rebuilt by torch._utils._rebuild_tensor_v2 from a storage the pickle names
// by key (the archive's data/<key> entry).
//
// Reading runs a restricted pickle machine, not Python's: it knows the
// opcodes of protocols 2 to 4 that such files use, and calls nothing. The
// only callables it accepts are OrderedDict, _rebuild_tensor_v2 and
// _rebuild_parameter, applied to checked arguments; anything else (other
// globals, classes, code) is refused naming it, so a hostile file cannot run
// code the way Python's pickle.load lets it. Nesting is bounded, containers
// cannot be changed once inside another (which rules out cycles), and every
// read is bounds-checked. Faults are kDataLoss (damaged) or kInvalidArgument
// (a valid pickle that is not a state_dict), with the byte offset.
//
// Memory is bounded by the input: every object, stack, mark and memo entry,
// container element and string byte the machine makes (and each tensor and
// name it hands on) is charged against a budget of kPickleBytesPerInputByte
// times the input's size plus kPickleBudgetSlack; past it the pickle is
// refused (kResourceExhausted naming the limit and what exceeded it), so
// megabytes of one-byte opcodes cannot take gigabytes as Python's pickle
// would. A tensor object named several times (memoized) is one tensor.
//
// Thread safety: pure functions.
#ifndef DTRAIN_MODELS_STATE_DICT_TORCH_PICKLE_H_
#define DTRAIN_MODELS_STATE_DICT_TORCH_PICKLE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "models/state_dict/safetensors.h"

namespace dtrain::models::state_dict {

// One tensor as the pickle describes it; the bytes are in the archive.
struct PickledTensor {
  std::string storage_key;  // The archive's "data/<storage_key>" entry.
  Dtype dtype = Dtype::kF32;
  int64_t storage_numel = 0;  // Elements in the storage.
  int64_t offset = 0;         // In elements.
  std::vector<int64_t> size;
  std::vector<int64_t> stride;  // In elements.
};

using PickledStateDict = std::vector<std::pair<std::string, PickledTensor>>;

// What a state_dict pickle holds: each tensor object once (a name bound to a
// memoized tensor, or a parameter wrapping one, shares its index), and the
// dict's names in pickle order with their tensor's index.
struct StateDictPickle {
  std::vector<PickledTensor> tensors;
  std::vector<std::pair<std::string, size_t>> names;
};

// The budget: approximate bytes of memory per byte of input, and the
// allowance every pickle gets (the input is what the caller passes as
// `input_size`, or the pickle's bytes).
inline constexpr uint64_t kPickleBytesPerInputByte = 16;
inline constexpr uint64_t kPickleBudgetSlack = uint64_t{1} << 20;

// The top-level dict's entries in pickle order; a name given twice is
// kDataLoss. Its `_metadata` (module versions) is read and dropped. Reading
// stops at the pickle's STOP; `end`, when given, receives the offset after it
// (the legacy format holds several pickles back to back, and its storages'
// persistent ids carry a sixth field, None). `input_size`: the size of the
// file the pickle is part of, the basis of the budget (0: the pickle's).
absl::StatusOr<StateDictPickle> ReadStateDictPickle(absl::string_view pickle,
                                                    size_t* end = nullptr,
                                                    size_t input_size = 0);

// For the legacy format's other pickles: the length of a pickle of plain
// values (None, bools, ints, floats, strings, tuples, lists, dicts), and a
// pickled list of strings; budgets as above.
absl::StatusOr<size_t> SkipPickle(absl::string_view bytes,
                                  size_t input_size = 0);
absl::StatusOr<std::vector<std::string>> ReadStringListPickle(
    absl::string_view bytes, size_t* end, size_t input_size = 0);

// A protocol-2 pickle of an OrderedDict, as torch.save writes a state_dict
// (without `_metadata`, which load_state_dict does not need).
std::string WriteStateDictPickle(const PickledStateDict& state);

// "FloatStorage", ... (the torch module's legacy storage class names, which
// torch.save still writes) and back.
absl::string_view StorageClassName(Dtype dtype);
absl::StatusOr<Dtype> DtypeOfStorageClass(absl::string_view name);

}  // namespace dtrain::models::state_dict

#endif  // DTRAIN_MODELS_STATE_DICT_TORCH_PICKLE_H_
