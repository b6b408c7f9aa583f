// The safetensors format (huggingface/safetensors, the published spec): an
// 8-byte little-endian header length N, N bytes of JSON naming each tensor's
// dtype, shape and [begin, end) byte range in the data that follows, and the
// data, little-endian and row-major. A "__metadata__" entry maps strings to
// strings. This codec knows nothing of LibTorch: it moves names, dtypes,
// shapes and bytes, so that a reader of hostile files stays small and
// checkable (docs/FORMATS.md).
//
// Decoding checks everything before it trusts it: the header length against
// the file and a 100 MB cap (as the reference implementation), JSON that
// parses to an object starting with '{', known dtypes, non-negative shapes
// whose byte size does not overflow and equals the entry's range, ranges that
// cover the data exactly once (no overlap, no hole: the spec's rule against
// files that are two formats at once), names given once. Any violation is
// kInvalidArgument naming the entry and what is wrong; nothing crashes or
// reads out of bounds. The header is read as it is parsed, without a JSON
// document tree (which costs tens of bytes per byte of "{},{},..."): memory
// is a small multiple of the file; fields other than dtype, shape and
// data_offsets are walked and dropped.
//
// Thread safety: pure functions.
#ifndef DTRAIN_MODELS_STATE_DICT_SAFETENSORS_H_
#define DTRAIN_MODELS_STATE_DICT_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dtrain::models::state_dict {

// The dtypes state_dicts hold, by their safetensors names.
enum class Dtype { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool };

// "F32", ...; and back (kInvalidArgument listing the known names).
absl::string_view DtypeName(Dtype dtype);
absl::StatusOr<Dtype> ParseDtype(absl::string_view name);
// Bytes per element.
int DtypeSize(Dtype dtype);

struct TensorEntry {
  std::string name;
  Dtype dtype = Dtype::kF32;
  std::vector<int64_t> shape;
  // Little-endian, row-major; size = product(shape) * DtypeSize(dtype).
  std::string data;
};

struct SafetensorsFile {
  // In file order of their data (Encode writes them in this order).
  std::vector<TensorEntry> tensors;
  std::map<std::string, std::string> metadata;
};

// The file's bytes; the header is padded with spaces to a multiple of 8 bytes
// so that the data is aligned. kInvalidArgument for an entry whose data size
// does not match its shape, an empty or duplicate name, or "__metadata__" as
// a tensor name.
absl::StatusOr<std::string> EncodeSafetensors(const SafetensorsFile& file);

// The entries in the order of their data, with their bytes copied out.
absl::StatusOr<SafetensorsFile> DecodeSafetensors(absl::string_view bytes);

}  // namespace dtrain::models::state_dict

#endif  // DTRAIN_MODELS_STATE_DICT_SAFETENSORS_H_
