#include "dist/backend/shm/segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/posix_io.h"

namespace dtrain::backend::shm {
namespace {

constexpr uint64_t kMagic = 0x64747261696e7368ULL;  // "dtrainsh"
constexpr size_t kHeader = 64;

struct Header {
  uint64_t magic;
  uint64_t token;
  uint64_t size;
};

uint64_t RandomToken() {
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

}  // namespace

Segment::Segment(int fd, void* base, size_t mapped, std::string locator)
    : fd_(fd),
      base_(base),
      mapped_(mapped),
      data_(static_cast<char*>(base) + kHeader),
      size_(mapped - kHeader),
      locator_(std::move(locator)) {}

Segment::~Segment() {
  ::munmap(base_, mapped_);
  CloseFile();
}

void Segment::CloseFile() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

absl::StatusOr<std::unique_ptr<Segment>> Segment::Create(size_t bytes) {
  const size_t mapped = kHeader + ((bytes + 63) / 64) * 64;
  const int fd = ::memfd_create("dtrain-shm", MFD_CLOEXEC);
  if (fd < 0) return base::ErrnoStatus(errno, "memfd_create");
  if (::ftruncate(fd, static_cast<off_t>(mapped)) != 0) {
    absl::Status s = base::ErrnoStatus(
        errno, absl::StrCat("sizing the segment to ", mapped, " B"));
    ::close(fd);
    return s;
  }
  void* base =
      ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    absl::Status s = base::ErrnoStatus(errno, "mapping the segment");
    ::close(fd);
    return s;
  }
  Header h{kMagic, RandomToken(), mapped};
  std::memcpy(base, &h, sizeof(h));
  std::string locator =
      absl::StrCat(::getpid(), " ", fd, " ", mapped, " ", h.token);
  return std::unique_ptr<Segment>(
      new Segment(fd, base, mapped, std::move(locator)));
}

absl::StatusOr<std::unique_ptr<Segment>> Segment::Attach(
    absl::string_view locator) {
  const std::vector<absl::string_view> parts = absl::StrSplit(locator, ' ');
  int64_t pid = 0;
  int fd_number = 0;
  uint64_t mapped = 0;
  uint64_t token = 0;
  if (parts.size() != 4 || !absl::SimpleAtoi(parts[0], &pid) ||
      !absl::SimpleAtoi(parts[1], &fd_number) ||
      !absl::SimpleAtoi(parts[2], &mapped) ||
      !absl::SimpleAtoi(parts[3], &token) || mapped <= kHeader) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", locator, "' is not a segment locator (pid fd bytes token)"));
  }
  const std::string path = absl::StrCat("/proc/", pid, "/fd/", fd_number);
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("opening ", path, ": ", base::ErrnoText(errno),
                     " (not on the creator's host, or it has exited)"));
  }
  struct stat st;
  std::memset(&st, 0, sizeof(st));
  if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != mapped) {
    ::close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is not the segment: its size differs"));
  }
  void* base =
      ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int mmap_errno = errno;
  ::close(fd);  // The mapping keeps the memory.
  if (base == MAP_FAILED) {
    return base::ErrnoStatus(mmap_errno, "mapping the segment");
  }
  Header h{};
  std::memcpy(&h, base, sizeof(h));
  if (h.magic != kMagic || h.token != token || h.size != mapped) {
    ::munmap(base, mapped);
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is not the segment: its token differs"));
  }
  return std::unique_ptr<Segment>(
      new Segment(-1, base, mapped, std::string(locator)));
}

}  // namespace dtrain::backend::shm
