// Sequential reading of a data file that may be gzip-compressed: readers
// handle "train-images-idx3-ubyte" and "train-images-idx3-ubyte.gz" alike.
// Compression is recognised by gzip's magic bytes (1f 8b), not by the name.
// Concatenated gzip members are read as one stream, as gzip(1) does.
// How gzip input is recognised and read: docs/FORMATS.md.
//
// Every error names the path and the offset (in uncompressed bytes) at which
// it happened. Not thread-safe: one reader per InputFile.
#ifndef DTRAIN_DATA_INPUT_FILE_H_
#define DTRAIN_DATA_INPUT_FILE_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/atomic_file.h"

namespace dtrain::data::internal {

class InputFile {
 public:
  // kNotFound when the file does not exist, another code (with errno's text)
  // when it cannot be opened or read; kInvalidArgument naming the path for
  // anything but a regular file (a FIFO is refused without waiting for a
  // writer) and for a file of more than `max_file_bytes` (on disk: gzip data
  // is bounded by max_data_size below).
  static absl::StatusOr<std::unique_ptr<InputFile>> Open(
      std::string path, int64_t max_file_bytes = kMaxFileBytes);

  // The default limit: STL-10's unlabeled split, the largest file read, is
  // 2.8 GB.
  static constexpr int64_t kMaxFileBytes = base::kDataFileLimit.max_bytes;

  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  const std::string& path() const { return path_; }
  bool compressed() const { return compressed_; }
  // Size of the file on disk.
  uint64_t file_size() const { return file_size_; }
  // An upper bound on the size of the uncompressed data, to refuse absurd
  // sizes in a header before allocating them: the file size for raw files,
  // 1032 times it for gzip (deflate's largest compression ratio is 1032:1).
  uint64_t max_data_size() const;
  // Uncompressed bytes consumed so far.
  uint64_t offset() const { return offset_; }

  // Reads exactly `n` bytes into `dst`. kInvalidArgument saying that the file
  // is truncated, naming `what` ("the header", "image data"), when the data
  // ends first; kInvalidArgument for corrupt gzip data.
  absl::Status ReadExactly(void* dst, size_t n, absl::string_view what);

  // Reads up to `n` bytes; returns how many (0 only at the end of the data).
  absl::StatusOr<size_t> Read(void* dst, size_t n);

  // Reads everything that is left.
  absl::StatusOr<std::string> ReadRest();

  // OK when no data is left; kInvalidArgument saying how many bytes were left
  // after `what` otherwise (at least one; the count is exact for raw files).
  absl::Status ExpectEnd(absl::string_view what);

 private:
  InputFile(std::string path, std::FILE* file, uint64_t file_size,
            bool compressed);

  absl::StatusOr<size_t> ReadRaw(char* dst, size_t n);
  absl::StatusOr<size_t> ReadInflated(char* dst, size_t n);
  // Refills in_ from the file; returns false at the end of the file.
  absl::StatusOr<bool> FillInput();
  absl::Status Error(absl::string_view what) const;

  std::string path_;
  std::FILE* file_;
  uint64_t file_size_;
  bool compressed_;
  uint64_t offset_ = 0;

  // gzip state (z_stream lives behind a pointer to keep zlib.h out of this
  // header).
  struct Inflater;
  std::unique_ptr<Inflater> inflater_;
};

}  // namespace dtrain::data::internal

#endif  // DTRAIN_DATA_INPUT_FILE_H_
