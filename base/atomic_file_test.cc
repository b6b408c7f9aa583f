#include "base/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::base {
namespace {

using ::testing::HasSubstr;

std::string FreshDir(const std::string& name) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/", name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(AtomicFileTest, WritesReplacesAndLeavesNoTemporary) {
  const std::string dir = FreshDir("atomic");
  const std::string path = dir + "/a.json";
  ASSERT_TRUE(WriteFileAtomically(path, "first").ok());
  ASSERT_TRUE(WriteFileAtomically(path, std::string("sec\0nd", 6)).ok());
  absl::StatusOr<std::string> read = ReadFile(path, kTextFileLimit);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, std::string("sec\0nd", 6));
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    EXPECT_FALSE(IsAtomicWriteTemporary(e.path().filename().string()));
    ++files;
  }
  EXPECT_EQ(files, 1);
}

TEST(AtomicFileTest, ErrorsNameThePath) {
  absl::Status s = WriteFileAtomically("/nonexistent/dir/x", "y");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("/nonexistent/dir"));
  absl::StatusOr<std::string> r = ReadFile("/nonexistent/file", kTextFileLimit);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(r.status().message(), HasSubstr("/nonexistent/file"));
  EXPECT_FALSE(WriteFileAtomically("", "y").ok());
}

TEST(AtomicFileTest, RecognisesTemporaries) {
  EXPECT_TRUE(IsAtomicWriteTemporary(".a.json.12.0.tmp"));
  EXPECT_FALSE(IsAtomicWriteTemporary("a.json"));
  EXPECT_FALSE(IsAtomicWriteTemporary(".hidden"));
}

constexpr FileLimit kSmall{"a test file", 1000};

TEST(BoundedReadTest, ReadsAFileUpToTheLimit) {
  const std::string path = FreshDir("bounded") + "/f";
  ASSERT_TRUE(WriteFileAtomically(path, std::string(1000, 'x')).ok());
  absl::StatusOr<std::string> read = ReadFile(path, kSmall);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->size(), 1000u);
}

TEST(BoundedReadTest, RefusesAFileOverTheLimit) {
  const std::string path = FreshDir("bounded") + "/f";
  ASSERT_TRUE(WriteFileAtomically(path, std::string(1001, 'x')).ok());
  absl::StatusOr<std::string> read = ReadFile(path, kSmall);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(read.status().message(), HasSubstr(path));
  EXPECT_THAT(read.status().message(), HasSubstr("1001 bytes"));
  EXPECT_THAT(read.status().message(),
              HasSubstr("limit of 1000 bytes for a test file"));
}

// A sparse file takes no disk space; its size alone must refuse it.
TEST(BoundedReadTest, RefusesASparseFileBiggerThanTheLimitUnread) {
  const std::string path = FreshDir("bounded") + "/sparse.dtc";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, int64_t{3} << 30), 0);
  ::close(fd);
  absl::StatusOr<std::string> read =
      ReadFile(path, FileLimit{"a checkpoint file", int64_t{1} << 30});
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(read.status().message(), HasSubstr("3221225472 bytes"));
  EXPECT_THAT(read.status().message(), HasSubstr("checkpoint file"));
}

TEST(BoundedReadTest, RefusesADeviceBehindASymlink) {
  const std::string link = FreshDir("bounded") + "/weights.pt";
  std::filesystem::create_symlink("/dev/zero", link);
  absl::StatusOr<std::string> read = ReadFile(link, kWeightsFileLimit);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(read.status().message(), HasSubstr(link));
  EXPECT_THAT(read.status().message(), HasSubstr("a character device"));
  EXPECT_THAT(read.status().message(), HasSubstr("weights file"));
}

// Without O_NONBLOCK, open() of a FIFO waits for a writer forever.
TEST(BoundedReadTest, RefusesAFifoWithoutWaitingForAWriter) {
  const std::string path = FreshDir("bounded") + "/token";
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  absl::StatusOr<std::string> read = ReadFile(path, kSecretFileLimit);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(read.status().message(), HasSubstr("a FIFO"));
  EXPECT_THAT(read.status().message(), HasSubstr(path));
}

TEST(BoundedReadTest, RefusesADirectory) {
  const std::string dir = FreshDir("bounded");
  absl::StatusOr<std::string> read = ReadFile(dir, kTextFileLimit);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(read.status().message(), HasSubstr("a directory"));
}

// A file that grows after the size check is still read no further than the
// limit + 1 bytes.
TEST(BoundedReadTest, StopsAtTheLimitWhenTheFileGrows) {
  const std::string path = FreshDir("bounded") + "/grows";
  ASSERT_TRUE(WriteFileAtomically(path, "small").ok());
  absl::StatusOr<OpenedFile> file = OpenForReading(path, kSmall);
  ASSERT_TRUE(file.ok()) << file.status();
  {
    const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND);
    ASSERT_GE(fd, 0);
    const std::string more(5000, 'y');
    ASSERT_EQ(::write(fd, more.data(), more.size()), 5000);
    ::close(fd);
  }
  absl::StatusOr<std::string> read = ReadOpenedFile(path, *file, kSmall);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(read.status().message(), HasSubstr("grew"));
  EXPECT_EQ(::lseek(file->fd.get(), 0, SEEK_CUR), 1001);
}

}  // namespace
}  // namespace dtrain::base
