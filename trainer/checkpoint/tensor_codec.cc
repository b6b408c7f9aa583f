#include "trainer/checkpoint/tensor_codec.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "base/tensor_text.h"

namespace dtrain::trainer::internal {
namespace {

// Tensor data is copied as the host stores it.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the checkpoint format is little-endian");

constexpr int kMaxDims = 8;

struct Dtype {
  uint8_t code;
  c10::ScalarType type;
};
constexpr Dtype kDtypes[] = {
    {1, c10::ScalarType::Float}, {2, c10::ScalarType::Double},
    {3, c10::ScalarType::Half},  {4, c10::ScalarType::BFloat16},
    {5, c10::ScalarType::Long},  {6, c10::ScalarType::Int},
    {7, c10::ScalarType::Byte},  {8, c10::ScalarType::Char},
    {9, c10::ScalarType::Short}, {10, c10::ScalarType::Bool},
};

const Dtype* DtypeOfCode(uint8_t code) {
  for (const Dtype& d : kDtypes) {
    if (d.code == code) return &d;
  }
  return nullptr;
}

const Dtype* DtypeOfType(c10::ScalarType type) {
  for (const Dtype& d : kDtypes) {
    if (d.type == type) return &d;
  }
  return nullptr;
}

}  // namespace

absl::Status Malformed(absl::string_view what) {
  return absl::DataLossError(absl::StrCat(kMalformed, what));
}

std::string Quoted(absl::string_view text) {
  return absl::StrCat("\"", absl::CHexEscape(text), "\"");
}

absl::Status WriteTensor(const at::Tensor& tensor, absl::string_view what,
                         base::ByteWriter& w) {
  const Dtype* dtype = DtypeOfType(tensor.scalar_type());
  if (dtype == nullptr) {
    std::vector<std::string> names;
    for (const Dtype& d : kDtypes) names.push_back(base::DtypeName(d.type));
    return w.Error(absl::StrCat(
        what, " has dtype ", c10::toString(tensor.scalar_type()),
        "; checkpoints hold ", absl::StrJoin(names, ", "), " tensors"));
  }
  if (tensor.layout() != at::kStrided) {
    return w.Error(absl::StrCat(what, " is not a dense (strided) tensor"));
  }
  if (tensor.dim() > kMaxDims) {
    return w.Error(absl::StrCat(what, " has ", tensor.dim(),
                                " dimensions (at most ", kMaxDims, ")"));
  }
  w.U8(dtype->code);
  w.U8(static_cast<uint8_t>(tensor.dim()));
  for (int64_t size : tensor.sizes()) w.I64(size);
  const at::Tensor cpu =
      tensor.detach().resolve_neg().to(at::kCPU).contiguous();
  if (cpu.nbytes() > 0) {
    w.Raw(absl::string_view(static_cast<const char*>(cpu.data_ptr()),
                            cpu.nbytes()));
  }
  return absl::OkStatus();
}

absl::Status ReadTensor(base::ByteReader& r, absl::string_view what,
                        at::Tensor* tensor) {
  const size_t at = r.offset();
  uint8_t code = 0;
  DTRAIN_RETURN_IF_ERROR(r.U8(absl::StrCat("dtype of ", what), &code));
  const Dtype* dtype = DtypeOfCode(code);
  if (dtype == nullptr) {
    return Malformed(absl::StrCat(what, " at offset ", at,
                                  " has unknown dtype code ", code));
  }
  uint8_t ndim = 0;
  DTRAIN_RETURN_IF_ERROR(r.U8(absl::StrCat("ndim of ", what), &ndim));
  if (ndim > kMaxDims) {
    return Malformed(absl::StrCat(what, " at offset ", at, " has ", ndim,
                                  " dimensions (at most ", kMaxDims, ")"));
  }
  const int64_t element_size =
      static_cast<int64_t>(c10::elementSize(dtype->type));
  std::vector<int64_t> sizes(ndim);
  // The product of the sizes, counting 0 as 1, bounds the strides LibTorch
  // computes: it must fit in int64 bytes even when there are no elements.
  int64_t bound = 1;
  bool empty = false;
  for (int64_t& size : sizes) {
    DTRAIN_RETURN_IF_ERROR(r.I64(absl::StrCat("shape of ", what), &size));
    if (size < 0) {
      return Malformed(
          absl::StrCat(what, " at offset ", at, " has a negative size ", size));
    }
    if (size == 0) empty = true;
    if (__builtin_mul_overflow(bound, std::max<int64_t>(size, 1), &bound) ||
        bound > std::numeric_limits<int64_t>::max() / element_size) {
      return Malformed(
          absl::StrCat(what, " at offset ", at, " has too large a shape"));
    }
  }
  const uint64_t nbytes = empty ? 0
                                : static_cast<uint64_t>(bound) *
                                      static_cast<uint64_t>(element_size);
  absl::string_view data;
  DTRAIN_RETURN_IF_ERROR(r.Raw(nbytes, absl::StrCat("data of ", what), &data));
  if (dtype->type == c10::ScalarType::Bool) {
    for (char c : data) {
      if (c != 0 && c != 1) {
        return Malformed(absl::StrCat(what, " at offset ", at,
                                      " holds a bool that is not 0 or 1"));
      }
    }
  }
  *tensor = at::empty(sizes, at::TensorOptions().dtype(dtype->type));
  if (nbytes > 0) std::memcpy(tensor->data_ptr(), data.data(), nbytes);
  return absl::OkStatus();
}

}  // namespace dtrain::trainer::internal
