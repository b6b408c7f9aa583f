// FileStore: the Store contract (store_conformance.h) through several handles
// on one file, and what only a file brings: ranks in separate processes, the
// file's lifetime, ranks killed mid-write, damaged and foreign files.

#include "dist/store/file_store.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/crc32_testing.h"
#include "dist/store/store_conformance.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::store {
namespace {

using ::testing::HasSubstr;
using testing::StoreConformanceTest;
using testing::StoreFactory;

// The documented on-disk format (file_store.h), written here independently so
// that the tests check the documentation too.
constexpr absl::string_view kHeader = "dtrain-file-store-v1\n";
constexpr uint8_t kSetOp = 1;
constexpr uint8_t kDeleteOp = 2;
constexpr uint8_t kOpenOp = 3;
constexpr uint8_t kCloseOp = 4;

std::string U32(uint32_t v) {
  std::string out(4, '\0');
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xFF);
  return out;
}

// Op and lengths with their checksum: the start of a record.
std::string RecordHeader(uint8_t op, uint32_t key_size, uint32_t value_size) {
  std::string lengths = absl::StrCat(std::string(1, static_cast<char>(op)),
                                     U32(key_size), U32(value_size));
  return absl::StrCat(lengths, U32(base::testing::BitwiseCrc32(lengths)));
}

std::string Record(uint8_t op, absl::string_view key, absl::string_view value) {
  const std::string body =
      absl::StrCat(RecordHeader(op, key.size(), value.size()), key, value);
  return absl::StrCat(body, U32(base::testing::BitwiseCrc32(body)));
}

std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

std::string FreshPath(absl::string_view name) {
  static std::atomic<int> counter{0};
  return absl::StrCat(TempDir(), "/", name, "_", getpid(), "_", counter++);
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteFile(const std::string& path, absl::string_view contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(contents.data(), contents.size());
  ASSERT_TRUE(out.good()) << path;
}

void AppendFile(const std::string& path, absl::string_view contents) {
  std::ofstream out(path, std::ios::binary | std::ios::app);
  out.write(contents.data(), contents.size());
  ASSERT_TRUE(out.good()) << path;
}

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::string out(n, '\0');
  for (char& c : out) c = static_cast<char>(gen() & 0xFF);
  return out;
}

std::shared_ptr<FileStore> OpenOrFail(
    const std::string& path, int num_ranks,
    absl::Duration timeout = absl::Seconds(30)) {
  absl::StatusOr<std::shared_ptr<FileStore>> store =
      FileStore::Open(path, num_ranks, timeout);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? *std::move(store) : nullptr;
}

StoreFactory FileStoreFactory() {
  // The suite runs one test at a time: each `open` starts a fresh file that
  // the test's `connect` calls join.
  static std::string* const path = new std::string;
  return {"FileStore",
          [](absl::Duration timeout) -> std::shared_ptr<Store> {
            *path = FreshPath("conformance");
            return OpenOrFail(*path, 0, timeout);
          },
          [](Store&, absl::Duration timeout) -> std::shared_ptr<Store> {
            return OpenOrFail(*path, 0, timeout);
          },
          [] {
            EXPECT_FALSE(Exists(*path))
                << "the last handle to close should have deleted " << *path;
          }};
}

INSTANTIATE_TEST_SUITE_P(File, StoreConformanceTest,
                         ::testing::Values(FileStoreFactory()),
                         [](const auto& info) { return info.param.name; });

// Child processes that are killed and reaped when the test leaves, whatever
// happened, so that a failure never leaves a process behind or hangs.
class Children {
 public:
  Children() = default;
  Children(const Children&) = delete;
  Children& operator=(const Children&) = delete;
  ~Children() {
    for (const pid_t pid : running_) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }

  // Forks; the child runs `body` and leaves with its result through _exit, so
  // that nothing of the parent (GoogleTest, the parent's handles) runs there.
  template <typename Body>
  pid_t Start(Body body) {
    std::fflush(nullptr);
    const pid_t pid = fork();
    if (pid == 0) _exit(body());
    if (pid > 0) running_.push_back(pid);
    return pid;
  }

  // Waits up to `timeout` for every child; the wait statuses in start order,
  // or fewer when some were still running (those stay for the destructor).
  std::vector<int> WaitAll(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    std::vector<int> statuses;
    while (!running_.empty()) {
      int status = 0;
      const pid_t done = waitpid(running_.front(), &status, WNOHANG);
      if (done == running_.front()) {
        statuses.push_back(status);
        running_.erase(running_.begin());
      } else if (done < 0 || absl::Now() > deadline) {
        break;
      } else {
        absl::SleepFor(absl::Milliseconds(5));
      }
    }
    return statuses;
  }

  void Kill(pid_t pid) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    running_.erase(std::remove(running_.begin(), running_.end(), pid),
                   running_.end());
  }

 private:
  std::vector<pid_t> running_;
};

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exit code ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return absl::StrCat("signal ", WTERMSIG(status));
  return absl::StrCat("wait status ", status);
}

int ChildFailed(int code, int rank, const absl::Status& status) {
  std::fprintf(stderr, "rank %d: step %d failed: %s\n", rank, code,
               status.ToString().c_str());
  std::fflush(stderr);
  return code;
}

constexpr int kAddsPerRank = 200;

// One rank of a process-per-rank job: join, count itself in, publish, wait
// for everyone. The exit code says which step failed.
int RankMain(const std::string& path, int rank, int world) {
  absl::StatusOr<std::shared_ptr<FileStore>> store =
      FileStore::Open(path, world, absl::Seconds(60));
  if (!store.ok()) return ChildFailed(10, rank, store.status());
  absl::StatusOr<int64_t> joined = (*store)->Add("joined", 1);
  if (!joined.ok()) return ChildFailed(11, rank, joined.status());
  // Contended read-modify-writes: a lost update shows in the total.
  for (int i = 0; i < kAddsPerRank; ++i) {
    absl::StatusOr<int64_t> sum = (*store)->Add("sum", 1);
    if (!sum.ok()) return ChildFailed(19, rank, sum.status());
  }
  absl::Status s = (*store)->Set(absl::StrCat("rank/", rank),
                                 absl::StrCat("address of ", rank));
  if (!s.ok()) return ChildFailed(12, rank, s);
  std::vector<std::string> keys;
  for (int r = 0; r < world; ++r) keys.push_back(absl::StrCat("rank/", r));
  s = (*store)->Wait(keys);
  if (!s.ok()) return ChildFailed(13, rank, s);
  for (int r = 0; r < world; ++r) {
    absl::StatusOr<std::string> v = (*store)->Get(keys[r]);
    if (!v.ok()) return ChildFailed(14, rank, v.status());
    if (*v != absl::StrCat("address of ", r)) {
      return ChildFailed(15, rank, absl::InternalError(*v));
    }
  }
  // Everyone counted itself in before publishing its key.
  absl::StatusOr<std::string> count = (*store)->Get("joined");
  if (!count.ok()) return ChildFailed(16, rank, count.status());
  if (*count != std::to_string(world)) {
    return ChildFailed(17, rank, absl::InternalError(*count));
  }
  absl::StatusOr<std::string> sum = (*store)->Get("sum");
  if (!sum.ok() || *sum != std::to_string(world * kAddsPerRank)) {
    return ChildFailed(20, rank, absl::InternalError(sum.ok() ? *sum : ""));
  }
  s = (*store)->Close();
  if (!s.ok()) return ChildFailed(18, rank, s);
  return 0;
}

TEST(FileStoreTest, RanksInSeparateProcessesMeetAndTheLastDeletesTheFile) {
  constexpr int kWorld = 4;
  const std::string path = FreshPath("processes");
  Children children;
  for (int rank = 0; rank < kWorld; ++rank) {
    ASSERT_GT(children.Start([&] { return RankMain(path, rank, kWorld); }), 0)
        << "fork: " << strerror(errno);
  }
  const std::vector<int> statuses = children.WaitAll(absl::Seconds(90));
  ASSERT_EQ(static_cast<int>(statuses.size()), kWorld)
      << "ranks still running after 90 s";
  for (int rank = 0; rank < kWorld; ++rank) {
    EXPECT_TRUE(WIFEXITED(statuses[rank]) && WEXITSTATUS(statuses[rank]) == 0)
        << "rank " << rank << ": " << DescribeWaitStatus(statuses[rank]);
  }
  EXPECT_FALSE(Exists(path)) << "the last rank to close should delete it";
}

TEST(FileStoreTest, RankKilledMidWriteLeavesNoLockAndNoBrokenRecord) {
  const std::string path = FreshPath("killed");
  std::shared_ptr<FileStore> store = OpenOrFail(path, 0);
  ASSERT_NE(store, nullptr);
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  Children children;
  const pid_t child = children.Start([&] {
    absl::StatusOr<std::shared_ptr<FileStore>> own =
        FileStore::Open(path, 0, absl::Seconds(30));
    if (!own.ok() || !(*own)->Set("child", "was here").ok()) return 1;
    // Die the way a rank killed in the middle of an append would: holding
    // the lock, with half a record written.
    const int fd = open(path.c_str(), O_RDWR);
    struct flock fl = {};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    if (fd < 0 || fcntl(fd, F_SETLKW, &fl) != 0) return 2;
    const std::string half =
        Record(kSetOp, "torn", std::string(1000, 'v')).substr(0, 500);
    if (lseek(fd, 0, SEEK_END) < 0 ||
        write(fd, half.data(), half.size()) !=
            static_cast<ssize_t>(half.size()) ||
        write(ready[1], "x", 1) != 1) {
      return 3;
    }
    while (true) pause();
  });
  ASSERT_GT(child, 0);
  struct pollfd pfd = {ready[0], POLLIN, 0};
  ASSERT_EQ(poll(&pfd, 1, 30000), 1) << "the child never got ready";
  children.Kill(child);
  close(ready[0]);
  close(ready[1]);

  const size_t torn_size = ReadFile(path).size();
  EXPECT_EQ(*store->Get("child", absl::Seconds(10)), "was here");
  ASSERT_TRUE(store->Set("after", "fine").ok());
  EXPECT_LT(ReadFile(path).size(), torn_size + 100)
      << "the half record should have been cut off before appending";
  std::shared_ptr<FileStore> late = OpenOrFail(path, 0);
  ASSERT_NE(late, nullptr);
  EXPECT_EQ(*late->Get("after", absl::Seconds(10)), "fine");
  EXPECT_FALSE(*late->Check({"torn"}));
  store.reset();
  late.reset();
  // The killed rank never closed its handle: by contract the file stays.
  EXPECT_TRUE(Exists(path));
  unlink(path.c_str());
}

TEST(FileStoreTest, LastHandleToCloseDeletesTheFile) {
  const std::string path = FreshPath("lifetime");
  std::shared_ptr<FileStore> a = OpenOrFail(path, 0);
  std::shared_ptr<FileStore> b = OpenOrFail(path, 0);
  ASSERT_TRUE(a != nullptr && b != nullptr);
  ASSERT_TRUE(a->Set("key", "value").ok());
  a.reset();
  EXPECT_TRUE(Exists(path));
  EXPECT_EQ(*b->Get("key", absl::Seconds(5)), "value");
  ASSERT_TRUE(b->Close().ok());
  EXPECT_FALSE(Exists(path));
}

TEST(FileStoreTest, WithNumRanksTheFileOutlivesARankThatLeavesEarly) {
  const std::string path = FreshPath("num_ranks");
  std::shared_ptr<FileStore> first = OpenOrFail(path, 2);
  ASSERT_NE(first, nullptr);
  ASSERT_TRUE(first->Set("from/0", "hello").ok());
  first.reset();
  ASSERT_TRUE(Exists(path)) << "deleted before the second rank came";
  std::shared_ptr<FileStore> second = OpenOrFail(path, 2);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(*second->Get("from/0", absl::Seconds(5)), "hello");
  second.reset();
  EXPECT_FALSE(Exists(path));
}

TEST(FileStoreTest, OpensRacingWithLastClosesNeverJoinADeletedFile) {
  const std::string path = FreshPath("churn");
  constexpr int kThreads = 4;
  constexpr int kRounds = 40;
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRounds; ++i) {
        absl::StatusOr<std::shared_ptr<FileStore>> store =
            FileStore::Open(path, 0, absl::Seconds(10));
        const std::string key = absl::StrCat(t, "/", i);
        if (!store.ok() || !(*store)->Set(key, "v").ok() ||
            !(*store)->Get(key, absl::Seconds(10)).ok() ||
            !(*store)->Close().ok()) {
          ++errors;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_FALSE(Exists(path));
}

TEST(FileStoreTest, CloseIsIdempotentAndLaterCallsFail) {
  const std::string path = FreshPath("closed");
  std::shared_ptr<FileStore> store = OpenOrFail(path, 0);
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(store->Close().ok());
  EXPECT_TRUE(store->Close().ok());
  const absl::Status s = store->Set("k", "v");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr(path));
  EXPECT_EQ(store->Get("k", absl::Seconds(1)).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(FileStoreTest, FileDeletedUnderAHandleIsReportedNotWaitedOn) {
  const std::string path = FreshPath("vanished");
  std::shared_ptr<FileStore> store = OpenOrFail(path, 0);
  ASSERT_NE(store, nullptr);
  ASSERT_EQ(unlink(path.c_str()), 0);
  const absl::Time start = absl::Now();
  const absl::StatusOr<std::string> v = store->Get("k", absl::Seconds(30));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(v.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(v.status().message(), HasSubstr("deleted"));
  EXPECT_THAT(v.status().message(), HasSubstr(path));
}

TEST(FileStoreTest, DescribeIsAFileUrl) {
  const std::string path = FreshPath("describe");
  std::shared_ptr<FileStore> store = OpenOrFail(path, 0);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->Describe(), "file://" + path);
  EXPECT_EQ(store->path(), path);
}

TEST(FileStoreTest, MissingDirectoryIsInvalidArgumentNamingIt) {
  const std::string dir = TempDir() + "/no/such/dir";
  const absl::StatusOr<std::shared_ptr<FileStore>> store =
      FileStore::Open(dir + "/store", 1, absl::Seconds(1));
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(store.status().message(), HasSubstr(dir));
  EXPECT_THAT(store.status().message(), HasSubstr("does not exist"));
}

TEST(FileStoreTest, BadArgumentsAreInvalidArgument) {
  EXPECT_EQ(FileStore::Open("", 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FileStore::Open(FreshPath("negative"), -1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FileStore::Open(TempDir(), 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Empty when opening `path` fails with a permission error that names the path
// and gives the system's reason; otherwise what went wrong.
std::string CheckPermissionDenied(const std::string& path) {
  const absl::StatusOr<std::shared_ptr<FileStore>> store =
      FileStore::Open(path, 1);
  const absl::Status& s = store.status();
  if (s.code() == absl::StatusCode::kPermissionDenied &&
      absl::StrContains(s.message(), path) &&
      absl::StrContains(s.message(), strerror(EACCES))) {
    return "";
  }
  return absl::StrCat("expected a permission error naming ", path,
                      ", got: ", s.ToString());
}

TEST(FileStoreTest, UnwritableFileIsPermissionDeniedWithTheReason) {
  const std::string path = FreshPath("read_only");
  WriteFile(path, "");
  ASSERT_EQ(chmod(path.c_str(), 0444), 0);
  if (geteuid() != 0) {
    EXPECT_EQ(CheckPermissionDenied(path), "");
    return;
  }
  // Root may write any file: check from a child that gives up root (which a
  // sandbox's user namespace may not allow).
  constexpr int kCannotDrop = 77;
  Children children;
  ASSERT_GT(children.Start([&] {
    constexpr uid_t kNobody = 65534;
    if (setgid(kNobody) != 0 || setuid(kNobody) != 0) return kCannotDrop;
    const std::string problem = CheckPermissionDenied(path);
    if (problem.empty()) return 0;
    std::fprintf(stderr, "%s\n", problem.c_str());
    return 1;
  }),
            0);
  const std::vector<int> statuses = children.WaitAll(absl::Seconds(30));
  ASSERT_EQ(statuses.size(), 1u);
  if (WIFEXITED(statuses[0]) && WEXITSTATUS(statuses[0]) == kCannotDrop) {
    GTEST_SKIP() << "running as root and cannot switch to another user";
  }
  EXPECT_TRUE(WIFEXITED(statuses[0]) && WEXITSTATUS(statuses[0]) == 0)
      << DescribeWaitStatus(statuses[0]) << " (see the child's stderr)";
}

TEST(FileStoreTest, ForeignFileIsRefusedAndLeftUntouched) {
  for (const std::string& contents :
       {RandomBytes(4096, 1), std::string("just some text\n"),
        std::string("dtrain-file-store-v9\n")}) {
    const std::string path = FreshPath("foreign");
    WriteFile(path, contents);
    const absl::StatusOr<std::shared_ptr<FileStore>> store =
        FileStore::Open(path, 1);
    ASSERT_FALSE(store.ok());
    EXPECT_EQ(store.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(store.status().message(), HasSubstr(path));
    EXPECT_THAT(store.status().message(), HasSubstr("not a file store"));
    EXPECT_EQ(ReadFile(path), contents);
  }
}

// A log as a job leaves it mid-run: one handle still open, some keys set.
std::string SampleLog(std::vector<std::string>* keys) {
  const std::string path = FreshPath("sample");
  std::shared_ptr<FileStore> store = OpenOrFail(path, 0);
  if (store == nullptr) return "";
  for (int i = 0; i < 5; ++i) {
    keys->push_back(absl::StrCat("key/", i));
    EXPECT_TRUE(store->Set(keys->back(), absl::StrCat("value ", i)).ok());
  }
  EXPECT_TRUE(store->Delete(keys->front()).ok());
  std::string log = ReadFile(path);
  store.reset();
  return log;
}

TEST(FileStoreTest, LogCutAtAnyByteIsRepaired) {
  std::vector<std::string> keys;
  const std::string log = SampleLog(&keys);
  ASSERT_THAT(log, ::testing::StartsWith(std::string(kHeader)));
  for (size_t cut = 0; cut < log.size(); ++cut) {
    SCOPED_TRACE(
        absl::StrCat("log cut to ", cut, " of ", log.size(), " bytes"));
    const std::string path = FreshPath("cut");
    WriteFile(path, log.substr(0, cut));
    std::shared_ptr<FileStore> store = OpenOrFail(path, 0);
    ASSERT_NE(store, nullptr);
    // What survives is a prefix of the history: keys are set in order.
    bool gap = false;
    for (size_t i = 1; i < keys.size(); ++i) {
      const bool present = *store->Check({keys[i]});
      EXPECT_FALSE(present && gap) << keys[i] << " present after a gap";
      gap = gap || !present;
      if (present) {
        EXPECT_EQ(*store->Get(keys[i], absl::Seconds(1)),
                  absl::StrCat("value ", i));
      }
    }
    ASSERT_TRUE(store->Set("new", "record").ok());
    std::shared_ptr<FileStore> other = OpenOrFail(path, 0);
    ASSERT_NE(other, nullptr);
    EXPECT_EQ(*other->Get("new", absl::Seconds(1)), "record");
    store.reset();
    other.reset();
    unlink(path.c_str());  // the sample's own handle never closed here
  }
}

TEST(FileStoreTest, DamagedRecordsGiveDataLossNamingTheFile) {
  std::vector<std::string> keys;
  const std::string log = SampleLog(&keys);
  ASSERT_GT(log.size(), kHeader.size());
  std::mt19937 gen(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::string damaged = log;
    const size_t at = kHeader.size() + gen() % (log.size() - kHeader.size());
    const size_t n = 1 + gen() % std::min<size_t>(16, log.size() - at);
    const std::string noise = RandomBytes(n, trial);
    damaged.replace(at, n, noise);
    if (damaged == log) continue;
    SCOPED_TRACE(absl::StrCat(n, " random bytes at ", at));
    const std::string path = FreshPath("damaged");
    WriteFile(path, damaged);
    const absl::StatusOr<std::shared_ptr<FileStore>> store =
        FileStore::Open(path, 0, absl::Seconds(1));
    ASSERT_FALSE(store.ok());
    EXPECT_EQ(store.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(store.status().message(), HasSubstr(path));
    unlink(path.c_str());
  }
}

TEST(FileStoreTest, HugeLengthsAreRejectedBeforeAllocating) {
  const std::string path = FreshPath("huge");
  WriteFile(path, absl::StrCat(kHeader,
                               RecordHeader(kSetOp, 0xFFFFFFFFu, 0xFFFFFFFFu),
                               "short"));
  const absl::StatusOr<std::shared_ptr<FileStore>> store =
      FileStore::Open(path, 0);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(store.status().message(), HasSubstr(path));
  EXPECT_THAT(store.status().message(), HasSubstr("exceed"));
}

// What a handle writes is the documented format byte for byte, checksums
// included, so logs written by other builds of the store stay readable.
TEST(FileStoreTest, WritesTheDocumentedFormat) {
  // One record spelled out: zlib's CRC-32 (Python's zlib.crc32 gives the same
  // bytes) of the 9 bytes of op and lengths, then of everything before.
  EXPECT_EQ(absl::BytesToHexString(Record(kSetOp, "key", "value")),
            "010300000005000000"
            "3cf72348"
            "6b657976616c7565"
            "e0eaa2d8");
  const std::string path = FreshPath("format");
  // Two ranks, one closed: the file stays for the other.
  std::shared_ptr<FileStore> store = OpenOrFail(path, 2);
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Set("key", "value").ok());
  ASSERT_EQ(*store->Add("n", 5), 5);
  ASSERT_EQ(*store->CompareSet("n", "5", "six"), "six");
  ASSERT_TRUE(*store->Delete("key"));
  ASSERT_TRUE(store->Close().ok());
  char host[256] = {};
  ASSERT_EQ(gethostname(host, sizeof(host) - 1), 0);
  const std::string me = absl::StrCat(host, ":", getpid());
  EXPECT_EQ(
      absl::BytesToHexString(ReadFile(path)),
      absl::BytesToHexString(absl::StrCat(
          kHeader, Record(kOpenOp, "", me), Record(kSetOp, "key", "value"),
          Record(kSetOp, "n", "5"), Record(kSetOp, "n", "six"),
          Record(kDeleteOp, "key", ""), Record(kCloseOp, "", me))));
}

TEST(FileStoreTest, RecordsWrittenByTheDocumentedFormatAreRead) {
  const std::string path = FreshPath("by_hand");
  const std::string value("by\0hand", 7);
  WriteFile(path, absl::StrCat(kHeader, Record(kSetOp, "written", value)));
  std::shared_ptr<FileStore> store = OpenOrFail(path, 0);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(*store->Get("written", absl::Seconds(1)), value);
  AppendFile(path, Record(kSetOp, "appended", "later"));
  EXPECT_EQ(*store->Get("appended", absl::Seconds(1)), "later");
}

TEST(FileStoreTest, BinaryKeysAndValuesAndLargeValuesCrossHandles) {
  const std::string path = FreshPath("bytes");
  std::shared_ptr<FileStore> writer = OpenOrFail(path, 0);
  ASSERT_NE(writer, nullptr);
  const std::string key("k\0ey", 4);
  const std::string nul_value("\0\0a\0", 4);
  const std::string big = RandomBytes(1 << 20, 3);
  ASSERT_TRUE(writer->Set(key, nul_value).ok());
  ASSERT_TRUE(writer->Set("big", big).ok());
  // A new handle replays the whole log from the file.
  std::shared_ptr<FileStore> reader = OpenOrFail(path, 0);
  ASSERT_NE(reader, nullptr);
  EXPECT_EQ(*reader->Get(key, absl::Seconds(5)), nul_value);
  EXPECT_FALSE(*reader->Check({"k"}));
  EXPECT_EQ(*reader->Get("big", absl::Seconds(5)), big);
}

TEST(FileStoreTest, OversizedKeyIsInvalidArgument) {
  const std::string path = FreshPath("oversized");
  std::shared_ptr<FileStore> store = OpenOrFail(path, 0);
  ASSERT_NE(store, nullptr);
  const std::string key(FileStore::kMaxKeyBytes + 1, 'k');
  EXPECT_EQ(store->Set(key, "v").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Add(key, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dtrain::store
