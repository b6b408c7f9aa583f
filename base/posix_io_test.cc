#include "base/posix_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::base {
namespace {

using ::testing::StartsWith;

std::string TempPath(const char* name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

TEST(PosixIoTest, WritesReadsAndPreadsWholeFiles) {
  const std::string path = TempPath("posix_io_file");
  UniqueFd fd(
      ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  ASSERT_TRUE(fd.valid());
  const std::string data(200000, 'x');
  EXPECT_EQ(WriteFull(fd.get(), data), 0);
  EXPECT_EQ(PwriteFull(fd.get(), "abc", 10), 0);

  char buf[8];
  size_t got = 0;
  EXPECT_EQ(PreadFull(fd.get(), buf, 5, 9, &got), 0);
  EXPECT_EQ(got, 5u);
  EXPECT_EQ(std::string(buf, got), "xabcx");
  // Short only at the end of the file.
  EXPECT_EQ(PreadFull(fd.get(), buf, 8, data.size() - 3, &got), 0);
  EXPECT_EQ(got, 3u);

  ASSERT_EQ(::lseek(fd.get(), 0, SEEK_SET), 0);
  std::string all;
  EXPECT_EQ(ReadToEnd(fd.get(), &all), 0);
  EXPECT_EQ(all.size(), data.size());
  EXPECT_EQ(all.substr(9, 5), "xabcx");
  EXPECT_EQ(fd.Close(), 0);
  EXPECT_FALSE(fd.valid());
}

TEST(PosixIoTest, ReportsTheErrnoOfAFailedCall) {
  EXPECT_EQ(WriteFull(-1, "x"), EBADF);
  std::string out;
  EXPECT_EQ(ReadToEnd(-1, &out), EBADF);
}

TEST(UniqueFdTest, ClosesOnDestructionAndMovesOwnership) {
  int raw = -1;
  {
    UniqueFd a(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    raw = a.get();
    ASSERT_GE(raw, 0);
    UniqueFd b = std::move(a);
    EXPECT_FALSE(a.valid());
    EXPECT_EQ(b.get(), raw);
    EXPECT_NE(::fcntl(raw, F_GETFD), -1);
  }
  EXPECT_EQ(::fcntl(raw, F_GETFD), -1);
  EXPECT_EQ(errno, EBADF);
}

TEST(ErrnoStatusTest, MapsCodeAndNamesWhatFailed) {
  const absl::Status missing = ErrnoStatus(ENOENT, "cannot open /x");
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.message(), "cannot open /x: No such file or directory");
  EXPECT_EQ(ErrnoStatus(EACCES, "w").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ErrnoStatus(ENOSPC, "w").code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(ErrnoText(EINTR), StartsWith("Interrupted"));
}

TEST(RetryOnEintrTest, RetriesOnlyEintr) {
  int calls = 0;
  const int rc = RetryOnEintr([&] {
    ++calls;
    errno = calls < 3 ? EINTR : EAGAIN;
    return -1;
  });
  EXPECT_EQ(rc, -1);
  EXPECT_EQ(calls, 3);
}

}  // namespace
}  // namespace dtrain::base
