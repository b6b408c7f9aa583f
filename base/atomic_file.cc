#include "base/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/posix_io.h"

namespace dtrain::base {
namespace {

absl::Status Errno(int error, absl::string_view what, absl::string_view path) {
  return ErrnoStatus(error, absl::StrCat(what, " ", path));
}

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string BaseName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

bool IsAtomicWriteTemporary(absl::string_view file_name) {
  return absl::StartsWith(file_name, ".") && absl::EndsWith(file_name, ".tmp");
}

absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view bytes) {
  if (path.empty() || path.back() == '/')
    return absl::InvalidArgumentError(
        absl::StrCat("cannot write '", path, "': not a file path"));
  static std::atomic<int> counter{0};
  const std::string dir = DirName(path);
  std::string tmp;
  UniqueFd fd;
  // A temporary left by a crashed writer with the same pid (common in
  // restarted containers) takes its name; the next number is free.
  for (int attempt = 0; attempt < 100 && !fd.valid(); ++attempt) {
    tmp = absl::StrCat(dir, "/.", BaseName(path), ".", ::getpid(), ".",
                       counter++, ".tmp");
    fd.Reset(
        ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (!fd.valid() && errno != EEXIST) break;
  }
  if (!fd.valid())
    return Errno(errno, absl::StrCat("cannot write ", path, ": cannot create"),
                 tmp);
  absl::Status status;
  if (const int error = WriteFull(fd.get(), bytes); error != 0)
    status = Errno(error, "cannot write", tmp);
  if (status.ok() && RetryOnEintr([&] { return ::fsync(fd.get()); }) != 0)
    status = Errno(errno, "cannot sync", tmp);
  if (const int error = fd.Close(); error != 0 && status.ok())
    status = Errno(error, "cannot close", tmp);
  if (status.ok() && ::rename(tmp.c_str(), path.c_str()) != 0)
    status = Errno(errno, absl::StrCat("cannot rename ", tmp, " to"), path);
  if (!status.ok()) {
    ::unlink(tmp.c_str());
    return status;
  }
  // The rename is durable only once the directory entry is.
  const UniqueFd dir_fd(
      ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir_fd.valid()) return Errno(errno, "cannot open directory", dir);
  if (RetryOnEintr([&] { return ::fsync(dir_fd.get()); }) != 0)
    return Errno(errno, "cannot sync directory", dir);
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  const UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return Errno(errno, "cannot open", path);
  std::string out;
  if (const int error = ReadToEnd(fd.get(), &out); error != 0)
    return Errno(error, "cannot read", path);
  return out;
}

}  // namespace dtrain::base
