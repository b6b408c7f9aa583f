#include "base/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace dtrain::base {
namespace {

absl::Status Errno(int error, absl::string_view what, absl::string_view path) {
  const std::string message =
      absl::StrCat(what, " ", path, ": ", std::strerror(error));
  if (error == ENOENT) return absl::NotFoundError(message);
  if (error == EACCES || error == EPERM)
    return absl::PermissionDeniedError(message);
  if (error == ENOSPC || error == EDQUOT)
    return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
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

absl::Status WriteAll(int fd, absl::string_view bytes,
                      const std::string& path) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno(errno, "cannot write", path);
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
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
  int fd = -1;
  // A temporary left by a crashed writer with the same pid (common in
  // restarted containers) takes its name; the next number is free.
  for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
    tmp = absl::StrCat(dir, "/.", BaseName(path), ".", ::getpid(), ".",
                       counter++, ".tmp");
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0)
    return Errno(errno, absl::StrCat("cannot write ", path, ": cannot create"),
                 tmp);
  absl::Status status = WriteAll(fd, bytes, tmp);
  if (status.ok() && ::fsync(fd) != 0)
    status = Errno(errno, "cannot sync", tmp);
  if (::close(fd) != 0 && status.ok())
    status = Errno(errno, "cannot close", tmp);
  if (status.ok() && ::rename(tmp.c_str(), path.c_str()) != 0)
    status = Errno(errno, absl::StrCat("cannot rename ", tmp, " to"), path);
  if (!status.ok()) {
    ::unlink(tmp.c_str());
    return status;
  }
  // The rename is durable only once the directory entry is.
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return Errno(errno, "cannot open directory", dir);
  const bool synced = ::fsync(dir_fd) == 0;
  const int sync_errno = errno;
  ::close(dir_fd);
  if (!synced) return Errno(sync_errno, "cannot sync directory", dir);
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errno(errno, "cannot open", path);
  std::string out;
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      ::close(fd);
      return Errno(error, "cannot read", path);
    }
    if (n == 0) break;
    out.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

}  // namespace dtrain::base
