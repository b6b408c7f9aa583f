#include "base/byte_codec.h"

#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace dtrain::base {

constexpr uint64_t kMaxU32 = std::numeric_limits<uint32_t>::max();

void PutLittleEndian(uint64_t value, int size, char* out) {
  for (int i = 0; i < size; ++i) out[i] = static_cast<char>(value >> (8 * i));
}

uint64_t GetLittleEndian(const char* in, int size) {
  uint64_t value = 0;
  for (int i = 0; i < size; ++i) {
    value |= uint64_t{static_cast<unsigned char>(in[i])} << (8 * i);
  }
  return value;
}

ByteWriter& ByteWriter::U8(uint8_t value) {
  out_.push_back(static_cast<char>(value));
  return *this;
}

ByteWriter& ByteWriter::F64(double value) {
  uint64_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return U64(bits);
}

ByteWriter& ByteWriter::Raw(absl::string_view bytes) {
  out_.append(bytes.data(), bytes.size());
  return *this;
}

absl::Status ByteWriter::Error(absl::string_view message) const {
  return absl::InvalidArgumentError(absl::StrCat(error_prefix_, message));
}

absl::Status ByteWriter::Count(size_t count, absl::string_view what) {
  if (count > kMaxU32) {
    return Error(absl::StrCat(count, " ", what, " (at most ", kMaxU32, ")"));
  }
  U32(static_cast<uint32_t>(count));
  return absl::OkStatus();
}

absl::Status ByteWriter::String(absl::string_view bytes,
                                absl::string_view what) {
  if (bytes.size() > kMaxU32) {
    return Error(absl::StrCat(what, " has ", bytes.size(), " bytes (at most ",
                              kMaxU32, ")"));
  }
  U32(static_cast<uint32_t>(bytes.size()));
  Raw(bytes);
  return absl::OkStatus();
}

void ByteWriter::PatchU64(size_t at, uint64_t value) {
  PutLittleEndian(value, 8, &out_[at]);
}

ByteWriter& ByteWriter::Put(uint64_t value, int size) {
  char bytes[8];
  PutLittleEndian(value, size, bytes);
  out_.append(bytes, size);
  return *this;
}

absl::Status ByteReader::Error(absl::string_view message) const {
  return absl::DataLossError(absl::StrCat(error_prefix_, message));
}

absl::Status ByteReader::Short(uint64_t size, absl::string_view what_prefix,
                               absl::string_view what) const {
  return Error(absl::StrCat(what_prefix, what, " needs ", size,
                            " bytes at offset ", offset(), ", ", remaining(),
                            " left"));
}

absl::Status ByteReader::Raw(uint64_t size, absl::string_view what,
                             absl::string_view* out) {
  if (size > remaining()) return Short(size, "", what);
  *out = data_.substr(pos_, size);
  pos_ += size;
  return absl::OkStatus();
}

absl::Status ByteReader::U8(absl::string_view what, uint8_t* value) {
  absl::string_view bytes;
  DTRAIN_RETURN_IF_ERROR(Raw(1, what, &bytes));
  *value = static_cast<uint8_t>(bytes[0]);
  return absl::OkStatus();
}

absl::Status ByteReader::Bool(absl::string_view what, bool* value) {
  const size_t at = offset();
  uint8_t byte = 0;
  DTRAIN_RETURN_IF_ERROR(U8(what, &byte));
  if (byte > 1) {
    pos_ -= 1;
    return Error(
        absl::StrCat(what, " at offset ", at, " is ", byte, ", not 0 or 1"));
  }
  *value = byte == 1;
  return absl::OkStatus();
}

absl::Status ByteReader::Fixed(int size, absl::string_view what,
                               uint64_t* value) {
  absl::string_view bytes;
  DTRAIN_RETURN_IF_ERROR(Raw(size, what, &bytes));
  *value = GetLittleEndian(bytes.data(), size);
  return absl::OkStatus();
}

absl::Status ByteReader::U16(absl::string_view what, uint16_t* value) {
  uint64_t v = 0;
  DTRAIN_RETURN_IF_ERROR(Fixed(2, what, &v));
  *value = static_cast<uint16_t>(v);
  return absl::OkStatus();
}

absl::Status ByteReader::U32(absl::string_view what, uint32_t* value) {
  uint64_t v = 0;
  DTRAIN_RETURN_IF_ERROR(Fixed(4, what, &v));
  *value = static_cast<uint32_t>(v);
  return absl::OkStatus();
}

absl::Status ByteReader::U64(absl::string_view what, uint64_t* value) {
  return Fixed(8, what, value);
}

absl::Status ByteReader::I64(absl::string_view what, int64_t* value) {
  uint64_t bits = 0;
  DTRAIN_RETURN_IF_ERROR(U64(what, &bits));
  *value = static_cast<int64_t>(bits);
  return absl::OkStatus();
}

absl::Status ByteReader::F64(absl::string_view what, double* value) {
  uint64_t bits = 0;
  DTRAIN_RETURN_IF_ERROR(U64(what, &bits));
  std::memcpy(value, &bits, sizeof(bits));
  return absl::OkStatus();
}

absl::Status ByteReader::String(absl::string_view what,
                                absl::string_view* value) {
  // The length's name is built only for the error: the TCP store reads
  // strings on every request.
  if (remaining() < 4) return Short(4, "length of ", what);
  const uint32_t size =
      static_cast<uint32_t>(GetLittleEndian(data_.data() + pos_, 4));
  pos_ += 4;
  if (absl::Status s = Raw(size, what, value); !s.ok()) {
    pos_ -= 4;
    return s;
  }
  return absl::OkStatus();
}

absl::Status ByteReader::String(absl::string_view what, std::string* value) {
  absl::string_view bytes;
  DTRAIN_RETURN_IF_ERROR(String(what, &bytes));
  value->assign(bytes.data(), bytes.size());
  return absl::OkStatus();
}

absl::Status ByteReader::Count(absl::string_view what, size_t min_size,
                               size_t* count) {
  const size_t at = offset();
  uint32_t value = 0;
  DTRAIN_RETURN_IF_ERROR(U32(what, &value));
  if (value > remaining() / min_size) {
    const size_t left = remaining();
    pos_ -= 4;
    return Error(absl::StrCat(what, " at offset ", at, " is ", value,
                              ", but the ", left, " bytes left hold at most ",
                              left / min_size));
  }
  *count = value;
  return absl::OkStatus();
}

absl::Status ByteReader::ExpectEnd(absl::string_view what) const {
  if (remaining() != 0) {
    return Error(absl::StrCat(remaining(), " unexpected bytes at offset ",
                              offset(), ", the end of ", what));
  }
  return absl::OkStatus();
}

}  // namespace dtrain::base
