#include "base/posix_io.h"

#include <string.h>
#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"

namespace dtrain::base {

std::string ErrnoText(int error_number) {
  char buf[256];
  // GNU strerror_r: returns the message, in `buf` or a static string.
  return strerror_r(error_number, buf, sizeof(buf));
}

absl::Status ErrnoStatus(int error_number, absl::string_view what) {
  return absl::Status(absl::ErrnoToStatusCode(error_number),
                      absl::StrCat(what, ": ", ErrnoText(error_number)));
}

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) Reset(other.Release());
  return *this;
}

int UniqueFd::Release() { return std::exchange(fd_, -1); }

void UniqueFd::Reset(int fd) {
  // close() is not retried on EINTR: on Linux the descriptor is gone anyway,
  // and a retry could close one another thread just opened.
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

int UniqueFd::Close() {
  if (fd_ < 0) return 0;
  const int rc = ::close(Release());
  return rc == 0 ? 0 : errno;
}

int WriteFull(int fd, absl::string_view data) {
  while (!data.empty()) {
    const ssize_t n =
        RetryOnEintr([&] { return ::write(fd, data.data(), data.size()); });
    if (n < 0) return errno;
    if (n == 0) return ENOSPC;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return 0;
}

int PwriteFull(int fd, absl::string_view data, int64_t offset) {
  while (!data.empty()) {
    const ssize_t n = RetryOnEintr(
        [&] { return ::pwrite(fd, data.data(), data.size(), offset); });
    if (n < 0) return errno;
    if (n == 0) return ENOSPC;
    data.remove_prefix(static_cast<size_t>(n));
    offset += n;
  }
  return 0;
}

int PreadFull(int fd, char* buf, size_t size, int64_t offset, size_t* got) {
  *got = 0;
  while (*got < size) {
    const ssize_t n = RetryOnEintr([&] {
      return ::pread(fd, buf + *got, size - *got,
                     offset + static_cast<int64_t>(*got));
    });
    if (n < 0) return errno;
    if (n == 0) break;
    *got += static_cast<size_t>(n);
  }
  return 0;
}

int ReadToEnd(int fd, std::string* out) {
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n =
        RetryOnEintr([&] { return ::read(fd, buffer, sizeof(buffer)); });
    if (n < 0) return errno;
    if (n == 0) return 0;
    out->append(buffer, static_cast<size_t>(n));
  }
}

}  // namespace dtrain::base
