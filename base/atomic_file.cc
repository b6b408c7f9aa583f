#include "base/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/posix_io.h"
#include "base/status_macros.h"

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

absl::Status TooLarge(absl::string_view path, absl::string_view size,
                      const FileLimit& limit) {
  return absl::InvalidArgumentError(absl::StrCat(
      "cannot read ", path, ": ", size, ", more than the limit of ",
      limit.max_bytes, " bytes for ", limit.what));
}

}  // namespace

absl::string_view FileTypeName(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "of an unknown file type";
}

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

absl::StatusOr<OpenedFile> OpenForReading(const std::string& path,
                                          const FileLimit& limit) {
  OpenedFile file;
  file.fd.Reset(RetryOnEintr(
      [&] { return ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC); }));
  if (!file.fd.valid()) return Errno(errno, "cannot open", path);
  struct stat st;
  if (::fstat(file.fd.get(), &st) != 0)
    return Errno(errno, "cannot stat", path);
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read ", path, ": ", FileTypeName(st.st_mode),
                     ", not a regular file (expected ", limit.what, ")"));
  }
  if (st.st_size > limit.max_bytes) {
    return TooLarge(path, absl::StrCat(st.st_size, " bytes"), limit);
  }
  file.size = st.st_size;
  return file;
}

absl::StatusOr<std::string> ReadOpenedFile(const std::string& path,
                                           OpenedFile& file,
                                           const FileLimit& limit) {
  const size_t cap = static_cast<size_t>(limit.max_bytes) + 1;
  std::string out;
  // The size at open is a hint: /proc files say 0, and a file may grow.
  out.reserve(
      static_cast<size_t>(std::min<int64_t>(file.size, limit.max_bytes)));
  char buffer[1 << 16];
  while (out.size() < cap) {
    const size_t want = std::min(sizeof(buffer), cap - out.size());
    const ssize_t n =
        RetryOnEintr([&] { return ::read(file.fd.get(), buffer, want); });
    if (n < 0) return Errno(errno, "cannot read", path);
    if (n == 0) return out;
    out.append(buffer, static_cast<size_t>(n));
  }
  return TooLarge(path, "it grew while being read", limit);
}

absl::StatusOr<std::string> ReadFile(const std::string& path,
                                     const FileLimit& limit) {
  DTRAIN_ASSIGN_OR_RETURN(OpenedFile file, OpenForReading(path, limit));
  return ReadOpenedFile(path, file, limit);
}

}  // namespace dtrain::base
