// Paths the user typed, as the user meant them. `bazel run` starts a binary
// inside its runfiles tree, so a relative output path would land in Bazel's
// cache; binaries resolve such paths against the directory `bazel run` was
// started from (Bazel's BUILD_WORKING_DIRECTORY, read by the binary's main
// and passed in here: libraries read no environment). And an output path that
// cannot be written is found before hours of training, not after them.
//
// Thread-safe (no state); the checks look at the file system as it is now.
#ifndef DTRAIN_BASE_USER_PATH_H_
#define DTRAIN_BASE_USER_PATH_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace dtrain::base {

// Where relative paths the user typed start from: `build_working_directory`
// (the binary's main passes getenv("BUILD_WORKING_DIRECTORY"), which `bazel
// run` sets) when set and not empty, else the current directory, so that
// messages can name absolute paths. Empty when neither is known.
std::string UserWorkingDirectory(const char* build_working_directory);

// `path` joined to `working_dir` when `path` is relative and both are
// non-empty; otherwise `path` unchanged. No normalisation: "../x" stays a
// component, resolved by the kernel against `working_dir`.
std::string ResolveUserPath(absl::string_view path,
                            absl::string_view working_dir);

// Whether a file can be (re)written at `path` the way WriteFileAtomically
// writes it: its directory exists and is writable, and `path` is not a
// directory. kInvalidArgument naming `what` (a flag, e.g. "--save_state_dict"),
// the path and the reason otherwise. Creates nothing.
absl::Status CheckWritableFile(absl::string_view what, const std::string& path);

// Whether a directory at `path` can hold new files: it exists and is writable,
// or the nearest existing ancestor is a writable directory (mkdir -p would
// succeed). kInvalidArgument naming `what`, the path and the reason otherwise.
// Creates nothing.
absl::Status CheckWritableDir(absl::string_view what, const std::string& path);

}  // namespace dtrain::base

#endif  // DTRAIN_BASE_USER_PATH_H_
