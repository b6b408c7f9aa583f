#include "data/idx.h"

#include <ATen/ops/empty.h>

#include <cstring>
#include <exception>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "base/torch_guard.h"
#include "data/input_file.h"

namespace dtrain::data {
namespace {

struct TypeInfo {
  at::ScalarType dtype;
  size_t size;
  const char* name;
};

bool LookUpType(uint8_t code, TypeInfo* info) {
  switch (static_cast<IdxType>(code)) {
    case IdxType::kUint8:
      *info = {at::kByte, 1, "uint8"};
      return true;
    case IdxType::kInt8:
      *info = {at::kChar, 1, "int8"};
      return true;
    case IdxType::kInt16:
      *info = {at::kShort, 2, "int16"};
      return true;
    case IdxType::kInt32:
      *info = {at::kInt, 4, "int32"};
      return true;
    case IdxType::kFloat32:
      *info = {at::kFloat, 4, "float32"};
      return true;
    case IdxType::kFloat64:
      *info = {at::kDouble, 8, "float64"};
      return true;
  }
  return false;
}

std::string DescribeMagic(uint32_t magic) {
  TypeInfo info;
  const uint8_t type = (magic >> 8) & 0xff;
  const uint8_t rank = magic & 0xff;
  return absl::StrFormat("0x%08x (%s, rank %d)", magic,
                         LookUpType(type, &info) ? info.name : "unknown type",
                         rank);
}

// IDX stores elements big-endian.
void BigEndianToHost(void* data, size_t count, size_t size) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  (void)data;
  (void)count;
  (void)size;
#else
  char* p = static_cast<char*>(data);
  switch (size) {
    case 2:
      for (size_t i = 0; i < count; ++i, p += 2) {
        uint16_t v;
        std::memcpy(&v, p, 2);
        v = __builtin_bswap16(v);
        std::memcpy(p, &v, 2);
      }
      break;
    case 4:
      for (size_t i = 0; i < count; ++i, p += 4) {
        uint32_t v;
        std::memcpy(&v, p, 4);
        v = __builtin_bswap32(v);
        std::memcpy(p, &v, 4);
      }
      break;
    case 8:
      for (size_t i = 0; i < count; ++i, p += 8) {
        uint64_t v;
        std::memcpy(&v, p, 8);
        v = __builtin_bswap64(v);
        std::memcpy(p, &v, 8);
      }
      break;
    default:
      break;
  }
#endif
}

uint32_t LoadBigEndian32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) |
         (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// Reads an IDX file; when `expected_magic` is not 0 the file must have it.
// `role` ("images", "labels") makes messages specific.
absl::StatusOr<at::Tensor> ReadIdx(const std::string& path,
                                   uint32_t expected_magic,
                                   absl::string_view role) {
  DTRAIN_ASSIGN_OR_RETURN(std::unique_ptr<internal::InputFile> opened,
                          internal::InputFile::Open(path));
  internal::InputFile& file = *opened;
  auto invalid = [&path](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", parts...));
  };

  unsigned char magic_bytes[4];
  DTRAIN_RETURN_IF_ERROR(file.ReadExactly(magic_bytes, 4, "the magic number"));
  const uint32_t magic = LoadBigEndian32(magic_bytes);
  if (magic_bytes[0] != 0 || magic_bytes[1] != 0) {
    return invalid(absl::StrFormat(
        "not an IDX file: the magic number 0x%08x does not start with two "
        "zero bytes",
        magic));
  }
  TypeInfo type;
  if (!LookUpType(magic_bytes[2], &type)) {
    return invalid(absl::StrFormat(
        "unknown IDX element type 0x%02x in magic number 0x%08x (known: 08 "
        "uint8, 09 int8, 0B int16, 0C int32, 0D float32, 0E float64)",
        magic_bytes[2], magic));
  }
  const int rank = magic_bytes[3];
  if (rank == 0) {
    return invalid(absl::StrFormat(
        "IDX magic number 0x%08x declares 0 dimensions", magic));
  }
  if (expected_magic != 0 && magic != expected_magic) {
    return invalid("magic number ", DescribeMagic(magic), " is not that of ",
                   role, " files, ", DescribeMagic(expected_magic),
                   ": is this the right file?");
  }

  std::vector<unsigned char> dim_bytes(4 * static_cast<size_t>(rank));
  DTRAIN_RETURN_IF_ERROR(
      file.ReadExactly(dim_bytes.data(), dim_bytes.size(), "the header"));
  std::vector<int64_t> dims(rank);
  uint64_t numel = 1;
  bool overflow = false;
  for (int d = 0; d < rank; ++d) {
    dims[d] = LoadBigEndian32(&dim_bytes[4 * d]);
    if (dims[d] != 0 && numel > (uint64_t{1} << 62) / dims[d]) overflow = true;
    numel *= static_cast<uint64_t>(dims[d]);
  }
  const std::string dims_text =
      absl::StrCat("[", absl::StrJoin(dims, ", "), "] ", type.name);
  const uint64_t header_size = 4 + dim_bytes.size();
  const uint64_t available = file.max_data_size() > header_size
                                 ? file.max_data_size() - header_size
                                 : 0;
  if (overflow || numel > available / type.size) {
    if (!file.compressed()) {
      return invalid("the file is truncated: the header declares ", dims_text,
                     " (", overflow ? "more than 2^62" : absl::StrCat(numel),
                     " elements) but only ", available,
                     " bytes of data follow it");
    }
    return invalid("the header declares ", dims_text,
                   ", more data than a gzip file of ", file.file_size(),
                   " bytes can hold");
  }

  at::Tensor tensor;
  DTRAIN_RETURN_IF_ERROR(base::GuardTorch(
      absl::StatusCode::kResourceExhausted,
      absl::StrCat(path, ": cannot allocate ", dims_text, ": "), [&] {
        tensor = at::empty(dims, at::TensorOptions().dtype(type.dtype));
        return absl::OkStatus();
      }));
  DTRAIN_RETURN_IF_ERROR(
      file.ReadExactly(tensor.data_ptr(), numel * type.size,
                       absl::StrCat("the data of ", dims_text)));
  BigEndianToHost(tensor.data_ptr(), numel, type.size);
  DTRAIN_RETURN_IF_ERROR(
      file.ExpectEnd(absl::StrCat("the data of ", dims_text)));
  return tensor;
}

}  // namespace

absl::StatusOr<at::Tensor> ReadIdxFile(const std::string& path) {
  return ReadIdx(path, /*expected_magic=*/0, "");
}

absl::StatusOr<Dataset> ReadIdxDataset(const std::string& images_path,
                                       const std::string& labels_path,
                                       int64_t num_classes, std::string name) {
  if (num_classes < 1 || num_classes > 256) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_classes must be in [1, 256] for uint8 IDX labels, got ",
        num_classes));
  }
  DTRAIN_ASSIGN_OR_RETURN(at::Tensor labels,
                          ReadIdx(labels_path, kIdxLabelsMagic, "labels"));
  DTRAIN_ASSIGN_OR_RETURN(at::Tensor images,
                          ReadIdx(images_path, kIdxImagesMagic, "images"));
  if (images.size(0) != labels.size(0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("image and label counts differ: ", images_path, " holds ",
                     images.size(0), " images, ", labels_path, " holds ",
                     labels.size(0), " labels"));
  }
  const uint8_t* label = labels.data_ptr<uint8_t>();
  for (int64_t i = 0; i < labels.size(0); ++i) {
    if (label[i] >= num_classes) {
      return absl::InvalidArgumentError(
          absl::StrCat(labels_path, ": label ", int{label[i]}, " of example ",
                       i, " is outside [0, ", num_classes, ")"));
    }
  }
  return Dataset::Create(std::move(name), images.unsqueeze(1),
                         std::move(labels), num_classes);
}

}  // namespace dtrain::data
