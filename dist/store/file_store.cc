#include "dist/store/file_store.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/byte_codec.h"
#include "base/crc32.h"
#include "base/posix_io.h"
#include "base/status_macros.h"
#include "dist/store/store_util.h"

namespace dtrain::store {
namespace {

constexpr absl::string_view kMagic = "dtrain-file-store-v1\n";
constexpr int64_t kCrcBytes = 4;
// op, key length, value length, then the CRC of those 9 bytes: lengths are
// trusted (to tell a record cut short from a damaged one) only when it
// matches.
constexpr int64_t kLengthsBytes = 9;
constexpr int64_t kRecordHeaderBytes = kLengthsBytes + kCrcBytes;
// Open retries when the file it opened was deleted by a last leaving handle
// before the lock was granted; more than a few in a row means a loop of
// creators and deleters that will not settle.
constexpr int kMaxOpenAttempts = 100;
constexpr absl::Duration kFirstPause = absl::Milliseconds(1);
constexpr absl::Duration kMaxPause = absl::Milliseconds(10);

// fcntl locks belong to the process, not to the descriptor: two handles of one
// process would both be granted the lock, and closing any descriptor of the
// file drops the process's lock. So the handles of a process take turns on
// this mutex while they hold the lock, and close descriptors under it.
// std::mutex's constructor is constexpr, so this is constant-initialized and
// safe to use from other static initializers.
std::mutex g_process_mu;

std::string Url(absl::string_view path) {
  return absl::StrCat("file://", path);
}

absl::Status ErrnoError(absl::string_view path, absl::string_view what,
                        int error_number) {
  return base::ErrnoStatus(error_number,
                           absl::StrCat("file store ", Url(path), ": ", what));
}

// Exclusive lock on the whole file, including bytes appended later.
int SetFileLock(int fd, short type) {
  struct flock fl = {};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = 0;
  fl.l_len = 0;
  return base::RetryOnEintr([&] { return fcntl(fd, F_SETLKW, &fl); }) == 0
             ? 0
             : errno;
}

// The process-wide turn plus the fcntl lock, for one operation. fcntl (POSIX)
// record locks rather than flock(): they are what NFS implements across
// machines (flock on NFS is emulated with them at best, and is local-only on
// older kernels), and taking one makes the Linux NFS client revalidate its
// cached view of the file, so the records other machines appended are seen.
class FileLock {
 public:
  explicit FileLock(int fd) : process_lock_(g_process_mu), fd_(fd) {
    error_ = SetFileLock(fd_, F_WRLCK);
  }
  ~FileLock() {
    if (error_ == 0) SetFileLock(fd_, F_UNLCK);
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

  int error() const { return error_; }

 private:
  std::lock_guard<std::mutex> process_lock_;
  const int fd_;
  int error_;
};

// Closes under the process-wide turn (see g_process_mu).
void CloseFd(base::UniqueFd& fd) {
  std::lock_guard<std::mutex> lock(g_process_mu);
  fd.Reset();
}

// "host:pid", the value of open and close records.
std::string Identity() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  return absl::StrCat(host, ":", getpid());
}

absl::Status CheckSizes(absl::string_view key, absl::string_view value) {
  if (static_cast<int64_t>(key.size()) > FileStore::kMaxKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("file store: key of ", key.size(),
                     " bytes exceeds the limit of ", FileStore::kMaxKeyBytes));
  }
  if (static_cast<int64_t>(value.size()) > FileStore::kMaxValueBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "file store: value of ", value.size(), " bytes for key '", key,
        "' exceeds the limit of ", FileStore::kMaxValueBytes));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<FileStore>> FileStore::Open(
    const std::string& path, int num_ranks, absl::Duration timeout) {
  if (path.empty()) {
    return absl::InvalidArgumentError("file store: the path is empty");
  }
  if (num_ranks < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "file store ", Url(path),
        ": num_ranks must be 0 (unknown) or positive, got ", num_ranks));
  }
  std::string abs_path = path;
  if (path[0] != '/') {
    char cwd[PATH_MAX];
    if (getcwd(cwd, sizeof(cwd)) == nullptr) {
      return ErrnoError(path, "cannot resolve the relative path", errno);
    }
    abs_path = absl::StrCat(cwd, "/", path);
  }
  if (abs_path.back() == '/') {
    return absl::InvalidArgumentError(absl::StrCat(
        "file store ", Url(abs_path), ": the path names a directory"));
  }
  const size_t slash = abs_path.rfind('/');
  const std::string dir = slash == 0 ? "/" : abs_path.substr(0, slash);
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) {
      return absl::InvalidArgumentError(
          absl::StrCat("file store ", Url(abs_path), ": directory ", dir,
                       " does not exist"));
    }
    return ErrnoError(abs_path, absl::StrCat("cannot reach directory ", dir),
                      err);
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "file store ", Url(abs_path), ": ", dir, " is not a directory"));
  }

  for (int attempt = 1;; ++attempt) {
    base::UniqueFd fd(base::RetryOnEintr([&] {
      return open(abs_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    }));
    if (!fd.valid()) {
      const int err = errno;
      if (err == EACCES || err == EPERM || err == EROFS) {
        return absl::PermissionDeniedError(
            absl::StrCat("file store ", Url(abs_path),
                         ": cannot open the file for reading and writing: ",
                         base::ErrnoText(err)));
      }
      if (err == EISDIR) {
        return absl::InvalidArgumentError(absl::StrCat(
            "file store ", Url(abs_path), ": the path is a directory"));
      }
      return ErrnoError(abs_path, "cannot open the file", err);
    }
    std::shared_ptr<FileStore> store(
        new FileStore(abs_path, num_ranks, std::move(fd), timeout));
    absl::Status joined;
    {
      std::lock_guard<std::mutex> lock(store->mu_);
      joined = store->JoinLocked();
      if (!joined.ok()) {
        // Not counted as open: the destructor must not append a close record.
        CloseFd(store->fd_);
      }
    }
    if (joined.ok()) return store;
    if (!absl::IsAborted(joined)) return joined;
    if (attempt == kMaxOpenAttempts) {
      return absl::UnavailableError(absl::StrCat(
          "file store ", Url(abs_path), ": the file was deleted under ",
          kMaxOpenAttempts, " attempts to open it in a row"));
    }
  }
}

FileStore::FileStore(std::string path, int num_ranks, base::UniqueFd fd,
                     absl::Duration timeout)
    : Store(timeout),
      path_(std::move(path)),
      num_ranks_(num_ranks),
      fd_(std::move(fd)) {}

FileStore::~FileStore() { Close().IgnoreError(); }

absl::Status FileStore::Close() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!fd_.valid()) return absl::OkStatus();
  const absl::Status s = WithLog([&]() {
    DTRAIN_RETURN_IF_ERROR(AppendLocked(Op::kClose, "", Identity()));
    const bool last = opened_ <= closed_ && closed_ >= num_ranks_;
    // Deleted under the lock: an Open waiting for it then finds the path gone
    // (JoinLocked) and creates a new file instead of joining a deleted one.
    if (last && unlink(path_.c_str()) != 0) {
      const int err = errno;
      if (err != ENOENT) {
        return IoError("cannot delete the file after the last handle closed",
                       err);
      }
    }
    return absl::OkStatus();
  });
  CloseFd(fd_);
  return s;
}

std::string FileStore::Describe() const { return Url(path_); }

absl::Status FileStore::IoError(absl::string_view what,
                                int error_number) const {
  return ErrnoError(path_, what, error_number);
}

absl::Status FileStore::DataLoss(int64_t offset, absl::string_view what) const {
  return absl::DataLossError(absl::StrCat(
      "file store ", Describe(), ": damaged log at byte ", offset, ": ", what));
}

absl::Status FileStore::JoinLocked() {
  FileLock lock(fd_.get());
  if (lock.error() != 0) return IoError("cannot lock the file", lock.error());
  struct stat mine, at_path;
  if (fstat(fd_.get(), &mine) != 0) return IoError("fstat", errno);
  const bool gone = stat(path_.c_str(), &at_path) != 0;
  if (gone && errno != ENOENT) return IoError("stat", errno);
  if (gone || mine.st_dev != at_path.st_dev || mine.st_ino != at_path.st_ino) {
    return absl::AbortedError("deleted by its last handle while opening");
  }
  const int64_t magic_size = static_cast<int64_t>(kMagic.size());
  std::string head(std::min<int64_t>(mine.st_size, magic_size), '\0');
  DTRAIN_RETURN_IF_ERROR(ReadAtLocked(0, head.data(), head.size()));
  if (head.size() < kMagic.size() ? !absl::StartsWith(kMagic, head)
                                  : head != kMagic) {
    return absl::InvalidArgumentError(absl::StrCat(
        "file store ", Describe(),
        ": the file exists but is not a file store log (it does not start "
        "with \"",
        kMagic.substr(0, kMagic.size() - 1),
        "\"); pick another path or delete the file"));
  }
  if (head.size() < kMagic.size()) {
    // New (empty) file, or a header cut short by a creator that died.
    const int err = base::PwriteFull(fd_.get(), kMagic, 0);
    if (err != 0) return IoError("cannot write the header", err);
  }
  pos_ = magic_size;
  DTRAIN_RETURN_IF_ERROR(RefreshLocked());
  return AppendLocked(Op::kOpen, "", Identity());
}

absl::Status FileStore::WithLog(absl::FunctionRef<absl::Status()> fn) {
  if (!fd_.valid()) {
    return absl::FailedPreconditionError(
        absl::StrCat("file store ", Describe(), ": used after Close()"));
  }
  FileLock lock(fd_.get());
  if (lock.error() != 0) return IoError("cannot lock the file", lock.error());
  absl::Status s = CheckStillAtPathLocked();
  if (s.ok()) s = RefreshLocked();
  if (s.ok()) s = fn();
  return s;
}

absl::StatusOr<bool> FileStore::Poll(absl::Duration timeout,
                                     absl::FunctionRef<bool()> probe) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::Duration pause = kFirstPause;
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      bool done = false;
      DTRAIN_RETURN_IF_ERROR(WithLog([&] {
        done = probe();
        return absl::OkStatus();
      }));
      if (done) return true;
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return false;
    absl::SleepFor(std::min(pause, left));
    pause = std::min(pause * 2, kMaxPause);
  }
}

absl::Status FileStore::CheckStillAtPathLocked() {
  // A handle on a file that is no longer at the path would wait forever for
  // keys nobody can write any more.
  struct stat mine, at_path;
  if (fstat(fd_.get(), &mine) != 0) return IoError("fstat", errno);
  if (stat(path_.c_str(), &at_path) != 0) {
    if (errno == ENOENT) {
      return absl::UnavailableError(
          absl::StrCat("file store ", Describe(),
                       ": the file was deleted while this handle was open"));
    }
    return IoError("stat", errno);
  }
  if (mine.st_dev != at_path.st_dev || mine.st_ino != at_path.st_ino) {
    return absl::UnavailableError(
        absl::StrCat("file store ", Describe(),
                     ": the file was replaced while this handle was open"));
  }
  return absl::OkStatus();
}

absl::Status FileStore::ReadAtLocked(int64_t offset, char* buf, int64_t size) {
  size_t got = 0;
  const int err = base::PreadFull(fd_.get(), buf, size, offset, &got);
  if (err != 0) return IoError("cannot read", err);
  if (static_cast<int64_t>(got) < size) {
    return DataLoss(offset + static_cast<int64_t>(got),
                    "the file ended early; another program truncated it");
  }
  return absl::OkStatus();
}

absl::Status FileStore::RefreshLocked() {
  struct stat st;
  if (fstat(fd_.get(), &st) != 0) return IoError("fstat", errno);
  const int64_t size = st.st_size;
  if (size < pos_) {
    return DataLoss(size, absl::StrCat("the file shrank below the ", pos_,
                                       " bytes already read; another program "
                                       "truncated it"));
  }
  std::string record;
  while (pos_ < size) {
    const int64_t left = size - pos_;
    bool cut_short = left < kRecordHeaderBytes;
    if (!cut_short) {
      char header[kRecordHeaderBytes];
      DTRAIN_RETURN_IF_ERROR(ReadAtLocked(pos_, header, kRecordHeaderBytes));
      if (base::Crc32(absl::string_view(header, kLengthsBytes)) !=
          base::GetLittleEndian(header + kLengthsBytes, 4)) {
        return DataLoss(pos_, "record header checksum mismatch");
      }
      const uint8_t op = static_cast<uint8_t>(header[0]);
      const int64_t key_size = base::GetLittleEndian(header + 1, 4);
      const int64_t value_size = base::GetLittleEndian(header + 5, 4);
      // Checked before anything is allocated: a damaged length must not turn
      // into a huge allocation.
      if (op < static_cast<uint8_t>(Op::kSet) ||
          op > static_cast<uint8_t>(Op::kClose)) {
        return DataLoss(
            pos_, absl::StrCat("unknown record type ", static_cast<int>(op)));
      }
      if (key_size > kMaxKeyBytes || value_size > kMaxValueBytes) {
        return DataLoss(pos_, absl::StrCat("record lengths ", key_size, " + ",
                                           value_size, " exceed the limits"));
      }
      if ((op != static_cast<uint8_t>(Op::kSet) &&
           op != static_cast<uint8_t>(Op::kDelete) && key_size != 0) ||
          (op == static_cast<uint8_t>(Op::kDelete) && value_size != 0)) {
        return DataLoss(pos_, absl::StrCat("record type ", static_cast<int>(op),
                                           " with unexpected lengths ",
                                           key_size, " + ", value_size));
      }
      const int64_t total =
          kRecordHeaderBytes + key_size + value_size + kCrcBytes;
      cut_short = total > left;
      if (!cut_short) {
        record.resize(total);
        DTRAIN_RETURN_IF_ERROR(ReadAtLocked(pos_, record.data(), total));
        const absl::string_view body(record.data(), total - kCrcBytes);
        if (base::Crc32(body) !=
            base::GetLittleEndian(record.data() + total - kCrcBytes, 4)) {
          return DataLoss(pos_, "checksum mismatch");
        }
        ApplyLocked(static_cast<Op>(op),
                    body.substr(kRecordHeaderBytes, key_size),
                    body.substr(kRecordHeaderBytes + key_size, value_size));
        pos_ += total;
      }
    }
    if (cut_short) {
      // Every write happens under the lock we hold, so a record cut short at
      // the end was left by a writer that died mid-write or ran out of disk;
      // nobody has read it (readers stop before it). Remove it so that the
      // next record starts at a record boundary.
      if (ftruncate(fd_.get(), pos_) != 0) {
        return IoError("cannot remove an unfinished record at the end", errno);
      }
      break;
    }
  }
  return absl::OkStatus();
}

absl::Status FileStore::AppendLocked(Op op, absl::string_view key,
                                     absl::string_view value) {
  std::string record;
  record.reserve(kRecordHeaderBytes + key.size() + value.size() + kCrcBytes);
  base::ByteWriter w(&record);
  w.U8(static_cast<uint8_t>(op))
      .U32(static_cast<uint32_t>(key.size()))
      .U32(static_cast<uint32_t>(value.size()));
  w.U32(base::Crc32(record)).Raw(key).Raw(value);
  w.U32(base::Crc32(record));
  const int err = base::PwriteFull(fd_.get(), record, pos_);
  if (err != 0) {
    // Best effort: leave no partial record behind (the next handle to take
    // the lock would remove it anyway).
    [[maybe_unused]] const int ignored = ftruncate(fd_.get(), pos_);
    return IoError(
        absl::StrCat("cannot append a record of ", record.size(), " bytes"),
        err);
  }
  ApplyLocked(op, key, value);
  pos_ += static_cast<int64_t>(record.size());
  return absl::OkStatus();
}

void FileStore::ApplyLocked(Op op, absl::string_view key,
                            absl::string_view value) {
  switch (op) {
    case Op::kSet:
      data_.insert_or_assign(std::string(key), std::string(value));
      break;
    case Op::kDelete:
      data_.erase(key);
      break;
    case Op::kOpen:
      ++opened_;
      break;
    case Op::kClose:
      ++closed_;
      break;
  }
}

absl::Status FileStore::Set(absl::string_view key, absl::string_view value) {
  DTRAIN_RETURN_IF_ERROR(CheckSizes(key, value));
  std::lock_guard<std::mutex> lock(mu_);
  return WithLog([&]() { return AppendLocked(Op::kSet, key, value); });
}

absl::StatusOr<std::string> FileStore::Get(absl::string_view key,
                                           absl::Duration timeout) {
  std::optional<std::string> value;
  DTRAIN_ASSIGN_OR_RETURN(const bool found, Poll(timeout, [&]() {
                            auto it = data_.find(key);
                            if (it == data_.end()) return false;
                            value = it->second;
                            return true;
                          }));
  if (!found) {
    const std::string k(key);
    return internal::KeysTimeoutError("get", {k}, {k}, Describe(), timeout);
  }
  return *std::move(value);
}

absl::StatusOr<int64_t> FileStore::Add(absl::string_view key, int64_t delta) {
  DTRAIN_RETURN_IF_ERROR(CheckSizes(key, ""));
  std::lock_guard<std::mutex> lock(mu_);
  int64_t sum = 0;
  DTRAIN_RETURN_IF_ERROR(WithLog([&]() {
    auto it = data_.find(key);
    DTRAIN_ASSIGN_OR_RETURN(
        sum, internal::AddToCounter(
                 key, it == data_.end() ? nullptr : &it->second, delta));
    return AppendLocked(Op::kSet, key, std::to_string(sum));
  }));
  return sum;
}

absl::StatusOr<std::string> FileStore::CompareSet(absl::string_view key,
                                                  absl::string_view expected,
                                                  absl::string_view desired) {
  DTRAIN_RETURN_IF_ERROR(CheckSizes(key, desired));
  std::lock_guard<std::mutex> lock(mu_);
  std::string result;
  DTRAIN_RETURN_IF_ERROR(WithLog([&]() {
    auto it = data_.find(key);
    const bool swap =
        it == data_.end() ? expected.empty() : it->second == expected;
    if (!swap) {
      if (it != data_.end()) result = it->second;
      return absl::OkStatus();
    }
    result = std::string(desired);
    return AppendLocked(Op::kSet, key, desired);
  }));
  return result;
}

absl::StatusOr<bool> FileStore::Check(absl::Span<const std::string> keys) {
  std::lock_guard<std::mutex> lock(mu_);
  bool all = true;
  DTRAIN_RETURN_IF_ERROR(WithLog([&]() {
    for (const std::string& k : keys) all = all && data_.contains(k);
    return absl::OkStatus();
  }));
  return all;
}

absl::Status FileStore::Wait(absl::Span<const std::string> keys,
                             absl::Duration timeout) {
  std::vector<std::string> missing;
  DTRAIN_ASSIGN_OR_RETURN(const bool found, Poll(timeout, [&]() {
                            missing.clear();
                            for (const std::string& k : keys) {
                              if (!data_.contains(k)) missing.push_back(k);
                            }
                            return missing.empty();
                          }));
  if (!found) {
    return internal::KeysTimeoutError("wait", keys, missing, Describe(),
                                      timeout);
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> FileStore::Delete(absl::string_view key) {
  std::lock_guard<std::mutex> lock(mu_);
  bool existed = false;
  DTRAIN_RETURN_IF_ERROR(WithLog([&]() {
    existed = data_.contains(key);
    if (!existed) return absl::OkStatus();
    return AppendLocked(Op::kDelete, key, "");
  }));
  return existed;
}

absl::StatusOr<int64_t> FileStore::NumKeys() {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t n = 0;
  DTRAIN_RETURN_IF_ERROR(WithLog([&]() {
    n = static_cast<int64_t>(data_.size());
    return absl::OkStatus();
  }));
  return n;
}

}  // namespace dtrain::store
