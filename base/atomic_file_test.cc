#include "base/atomic_file.h"

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
  absl::StatusOr<std::string> read = ReadFile(path);
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
  absl::StatusOr<std::string> r = ReadFile("/nonexistent/file");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(r.status().message(), HasSubstr("/nonexistent/file"));
  EXPECT_FALSE(WriteFileAtomically("", "y").ok());
}

TEST(AtomicFileTest, RecognisesTemporaries) {
  EXPECT_TRUE(IsAtomicWriteTemporary(".a.json.12.0.tmp"));
  EXPECT_FALSE(IsAtomicWriteTemporary("a.json"));
  EXPECT_FALSE(IsAtomicWriteTemporary(".hidden"));
}

}  // namespace
}  // namespace dtrain::base
