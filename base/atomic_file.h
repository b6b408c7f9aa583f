// Whole-file reads and crash-safe writes, for checkpoints and metrics files:
// a reader sees either the old file or the complete new one, never a torn
// one, even if the writer dies or the machine loses power mid-write.
// The temporary files' names: docs/FORMATS.md (checkpoint directory).
//
// Errors carry the status code of the system's errno (base::ErrnoStatus:
// ENOENT is kNotFound, EACCES kPermissionDenied, ENOSPC kResourceExhausted,
// ...) and name the path.
//
// Thread-compatible; concurrent writers of one path each leave a complete
// file (the last rename wins).
#ifndef DTRAIN_BASE_ATOMIC_FILE_H_
#define DTRAIN_BASE_ATOMIC_FILE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dtrain::base {

// Writes `bytes` to a temporary file in the same directory (".<name>.<pid>.
// <n>.tmp"), fsyncs it, renames it over `path` and fsyncs the directory. On
// failure the temporary is removed and `path` is untouched; the error names
// the path and the system's reason.
absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view bytes);

// The whole file. kNotFound for a missing file; other errors name the path
// and the system's reason.
absl::StatusOr<std::string> ReadFile(const std::string& path);

// True for the temporaries WriteFileAtomically leaves when its process dies
// mid-write (a file name, not a path).
bool IsAtomicWriteTemporary(absl::string_view file_name);

}  // namespace dtrain::base

#endif  // DTRAIN_BASE_ATOMIC_FILE_H_
