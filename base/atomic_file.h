// Whole-file reads and crash-safe writes, for checkpoints and metrics files:
// a reader sees either the old file or the complete new one, never a torn
// one, even if the writer dies or the machine loses power mid-write.
// The temporary files' names: docs/FORMATS.md (checkpoint directory).
//
// Reads are bounded: every file the project parses is opened through
// OpenForReading or ReadFile, which accept only regular files no larger than
// a limit the caller states (a path may name /dev/zero, a FIFO or a stray
// multi-gigabyte file: docs/RELIABILITY.md, "Files the project reads").
//
// Errors carry the status code of the system's errno (base::ErrnoStatus:
// ENOENT is kNotFound, EACCES kPermissionDenied, ENOSPC kResourceExhausted,
// ...) and name the path.
//
// Thread-compatible; concurrent writers of one path each leave a complete
// file (the last rename wins).
#ifndef DTRAIN_BASE_ATOMIC_FILE_H_
#define DTRAIN_BASE_ATOMIC_FILE_H_

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/posix_io.h"

namespace dtrain::base {

// Writes `bytes` to a temporary file in the same directory (".<name>.<pid>.
// <n>.tmp"), fsyncs it, renames it over `path` and fsyncs the directory. On
// failure the temporary is removed and `path` is untouched; the error names
// the path and the system's reason.
absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view bytes);

// What a file is, for errors ("a weights file"), and the most bytes a
// reader accepts for it.
struct FileLimit {
  absl::string_view what;
  int64_t max_bytes;
};

// Per-kind limits. Weights, checkpoints and datasets are held in memory
// whole, so their limit is large but below this machine class's memory;
// text files (configs, metrics, secrets) are small.
inline constexpr FileLimit kWeightsFileLimit{"a weights file",
                                             int64_t{16} << 30};
inline constexpr FileLimit kCheckpointFileLimit{"a checkpoint file",
                                                int64_t{16} << 30};
inline constexpr FileLimit kDataFileLimit{"a data file", int64_t{16} << 30};
inline constexpr FileLimit kTextFileLimit{"a text file", int64_t{64} << 20};
inline constexpr FileLimit kSecretFileLimit{"a secret file", int64_t{64} << 10};

// What a file of this st_mode is, for errors: "a directory", "a FIFO", "a
// character device", "a block device", "a socket", "a regular file".
absl::string_view FileTypeName(mode_t mode);

// A file opened for reading and its size when opened.
struct OpenedFile {
  UniqueFd fd;
  int64_t size = 0;
};

// Opens `path` read-only (non-blocking, so a FIFO does not wait for a
// writer) and checks that it is a regular file of at most limit.max_bytes.
// kNotFound etc. (errno's code) when it cannot be opened; kInvalidArgument
// naming the path and what it is ("a FIFO", "a directory", "a character
// device", ...) for anything but a regular file, and naming its size and the
// limit for a larger one.
absl::StatusOr<OpenedFile> OpenForReading(const std::string& path,
                                          const FileLimit& limit);

// The rest of an opened file, reading at most limit.max_bytes + 1 bytes in
// all: kInvalidArgument naming the path and the limit when the file grew
// past it after OpenForReading. `file.fd` is left at the end.
absl::StatusOr<std::string> ReadOpenedFile(const std::string& path,
                                           OpenedFile& file,
                                           const FileLimit& limit);

// The whole file: OpenForReading, then ReadOpenedFile. kNotFound for a
// missing file; other errors name the path and the system's reason.
absl::StatusOr<std::string> ReadFile(const std::string& path,
                                     const FileLimit& limit);

// True for the temporaries WriteFileAtomically leaves when its process dies
// mid-write (a file name, not a path).
bool IsAtomicWriteTemporary(absl::string_view file_name);

}  // namespace dtrain::base

#endif  // DTRAIN_BASE_ATOMIC_FILE_H_
