// POSIX file-descriptor plumbing that every layer writing files or sockets
// needs: an owner that closes, whole reads and writes that retry on EINTR,
// and errno turned into a Status that names what failed and where.
//
// Functions here return an errno value (0 on success) rather than a Status
// where the caller knows better what to say: a file store names its URL, a
// socket its peer.
#ifndef DTRAIN_BASE_POSIX_IO_H_
#define DTRAIN_BASE_POSIX_IO_H_

#include <sys/types.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace dtrain::base {

// Calls f() again while it fails with EINTR (returns -1 with errno EINTR),
// e.g. RetryOnEintr([&] { return ::fsync(fd); }).
template <typename F>
auto RetryOnEintr(F&& f) -> decltype(f()) {
  decltype(f()) result;
  do {
    result = f();
  } while (result == -1 && errno == EINTR);
  return result;
}

// The system's description of an errno value ("No such file or directory").
std::string ErrnoText(int error_number);

// A Status whose code follows the errno value (ENOENT -> kNotFound, EACCES ->
// kPermissionDenied, ENOSPC -> kResourceExhausted, ...) and whose message is
// `what` + ": " + ErrnoText(error_number). `what` says who failed doing what
// where, e.g. "cannot open /data/x".
absl::Status ErrnoStatus(int error_number, absl::string_view what);

// Owns a file descriptor and closes it when destroyed. Movable, not
// copyable; not thread-safe (one owner).
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { Reset(); }
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.Release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Gives up ownership without closing.
  int Release();
  // Closes the descriptor it holds, if any, and holds `fd` instead.
  void Reset(int fd = -1);
  // Closes now and reports close()'s errno (0 on success): a write's last
  // error can surface only here. Holds nothing afterwards.
  int Close();

 private:
  int fd_ = -1;
};

// Writes all of `data` to `fd`, retrying short writes and EINTR. Returns 0 or
// the errno of the failed write (ENOSPC when the system accepts no bytes).
int WriteFull(int fd, absl::string_view data);

// pwrite of all of `data` at `offset`; as WriteFull.
int PwriteFull(int fd, absl::string_view data, int64_t offset);

// Reads up to `size` bytes at `offset` into `buf`, retrying short reads and
// EINTR; *got < size only at the end of the file. Returns 0 or the errno.
int PreadFull(int fd, char* buf, size_t size, int64_t offset, size_t* got);

// Appends the rest of the file (from its current position) to *out. Returns
// 0 or the errno.
int ReadToEnd(int fd, std::string* out);

}  // namespace dtrain::base

#endif  // DTRAIN_BASE_POSIX_IO_H_
