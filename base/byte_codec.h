// The one little-endian byte codec of the project's binary formats (the
// checkpoint file, the file store's log, the TCP store's frames; see
// docs/FORMATS.md): fixed-width integers and doubles, length-prefixed
// strings, counts, and a reader that checks every length against the bytes
// left before it uses them, so hostile input yields an error, never a read
// past the end or a huge allocation.
//
// Writers and readers are not thread-safe; each is used by one thread.
#ifndef DTRAIN_BASE_BYTE_CODEC_H_
#define DTRAIN_BASE_BYTE_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace dtrain::base {

// The low `size` (1 to 8) bytes of `value`, least significant first.
void PutLittleEndian(uint64_t value, int size, char* out);
// The inverse: `size` (1 to 8) bytes at `in`.
uint64_t GetLittleEndian(const char* in, int size);

// Appends fields to a string the caller owns (and must keep alive).
class ByteWriter {
 public:
  // `error_prefix` starts the message of every error, e.g. "cannot encode
  // checkpoint: ".
  explicit ByteWriter(std::string* out, absl::string_view error_prefix = "")
      : out_(*out), error_prefix_(error_prefix) {}

  ByteWriter& U8(uint8_t value);
  ByteWriter& Bool(bool value) { return U8(value ? 1 : 0); }
  ByteWriter& U16(uint16_t value) { return Put(value, 2); }
  ByteWriter& U32(uint32_t value) { return Put(value, 4); }
  ByteWriter& U64(uint64_t value) { return Put(value, 8); }
  ByteWriter& I64(int64_t value) { return U64(static_cast<uint64_t>(value)); }
  // The IEEE-754 bits of `value`.
  ByteWriter& F64(double value);
  ByteWriter& Raw(absl::string_view bytes);

  // A uint32 count; kInvalidArgument ("<count> <what> (at most 4294967295)")
  // when it does not fit.
  absl::Status Count(size_t count, absl::string_view what);
  // A uint32 length, then the bytes; kInvalidArgument when longer than a
  // uint32 can say.
  absl::Status String(absl::string_view bytes, absl::string_view what);

  // kInvalidArgument with the writer's prefix, for values the caller cannot
  // encode.
  absl::Status Error(absl::string_view message) const;

  // Where the next byte goes; with PatchU64, for a length known only later.
  size_t position() const { return out_.size(); }
  // Overwrites 8 bytes at `at` (< position() - 7) with `value`.
  void PatchU64(size_t at, uint64_t value);

 private:
  ByteWriter& Put(uint64_t value, int size);

  std::string& out_;
  std::string error_prefix_;
};

// Reads fields front to back from bytes the caller keeps alive. A read that
// needs more bytes than are left, a bool that is neither 0 nor 1 and a count
// larger than the rest could hold fail with kDataLoss, naming the field and
// its offset; nothing is consumed then.
class ByteReader {
 public:
  // `base` is the offset of data[0] in the larger unit errors speak of;
  // `error_prefix` starts every error message, e.g. "malformed checkpoint
  // payload: ".
  ByteReader(absl::string_view data, size_t base = 0,
             absl::string_view error_prefix = "")
      : data_(data), base_(base), error_prefix_(error_prefix) {}

  size_t remaining() const { return data_.size() - pos_; }
  size_t offset() const { return base_ + pos_; }

  absl::Status Raw(uint64_t size, absl::string_view what,
                   absl::string_view* out);
  absl::Status U8(absl::string_view what, uint8_t* value);
  absl::Status Bool(absl::string_view what, bool* value);
  absl::Status U16(absl::string_view what, uint16_t* value);
  absl::Status U32(absl::string_view what, uint32_t* value);
  absl::Status U64(absl::string_view what, uint64_t* value);
  absl::Status I64(absl::string_view what, int64_t* value);
  absl::Status F64(absl::string_view what, double* value);
  // A uint32 length, then that many bytes, viewed in place.
  absl::Status String(absl::string_view what, absl::string_view* value);
  absl::Status String(absl::string_view what, std::string* value);
  // A uint32 count of items that take at least `min_size` (> 0) bytes each:
  // more than the bytes left can hold fails before anything is allocated.
  absl::Status Count(absl::string_view what, size_t min_size, size_t* count);
  // kDataLoss unless every byte was read; `what` names the unit.
  absl::Status ExpectEnd(absl::string_view what) const;

  // kDataLoss with the reader's prefix, for format errors the caller finds.
  absl::Status Error(absl::string_view message) const;

 private:
  // `size` (1 to 8) bytes as a little-endian integer.
  absl::Status Fixed(int size, absl::string_view what, uint64_t* value);
  // kDataLoss: `what_prefix` + `what` needs `size` bytes at the offset.
  absl::Status Short(uint64_t size, absl::string_view what_prefix,
                     absl::string_view what) const;

  absl::string_view data_;
  size_t base_;
  std::string error_prefix_;
  size_t pos_ = 0;
};

}  // namespace dtrain::base

#endif  // DTRAIN_BASE_BYTE_CODEC_H_
