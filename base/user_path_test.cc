#include "base/user_path.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::base {
namespace {

using ::testing::HasSubstr;

class UserPathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    char templ[4096];
    snprintf(templ, sizeof(templ), "%s/user_path_XXXXXX",
             tmp != nullptr ? tmp : "/tmp");
    ASSERT_NE(::mkdtemp(templ), nullptr);
    dir_ = templ;
  }
  std::string dir_;
};

TEST(ResolveUserPathTest, RelativePathsJoinTheWorkingDirectory) {
  EXPECT_EQ(ResolveUserPath("w.pt", "/home/me"), "/home/me/w.pt");
  EXPECT_EQ(ResolveUserPath("../x/w.pt", "/home/me/"), "/home/me/../x/w.pt");
  EXPECT_EQ(ResolveUserPath("/abs/w.pt", "/home/me"), "/abs/w.pt");
  // Outside `bazel run` there is no working directory to join.
  EXPECT_EQ(ResolveUserPath("w.pt", ""), "w.pt");
  EXPECT_EQ(ResolveUserPath("", "/home/me"), "");
}

TEST(UserWorkingDirectoryTest, BazelsDirectoryElseTheCurrentOne) {
  EXPECT_EQ(UserWorkingDirectory("/home/me"), "/home/me");
  char cwd[4096];
  ASSERT_NE(::getcwd(cwd, sizeof(cwd)), nullptr);
  EXPECT_EQ(UserWorkingDirectory(""), cwd);
  EXPECT_EQ(UserWorkingDirectory(nullptr), cwd);
}

TEST_F(UserPathTest, FileInAWritableDirectoryIsAccepted) {
  EXPECT_TRUE(CheckWritableFile("--out", dir_ + "/new.pt").ok());
  std::ofstream(dir_ + "/old.pt") << "x";
  EXPECT_TRUE(CheckWritableFile("--out", dir_ + "/old.pt").ok());
}

TEST_F(UserPathTest, FileInAMissingDirectoryIsRefusedByName) {
  absl::Status s = CheckWritableFile("--save_state_dict", dir_ + "/no/w.pt");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("--save_state_dict: cannot write "));
  EXPECT_THAT(s.message(), HasSubstr(dir_ + "/no/w.pt"));
  EXPECT_THAT(s.message(), HasSubstr("No such file or directory"));
}

TEST_F(UserPathTest, DirectoryGivenAsAFileIsRefused) {
  EXPECT_THAT(CheckWritableFile("--metrics_json", dir_).message(),
              HasSubstr("it is a directory"));
  EXPECT_THAT(CheckWritableFile("--metrics_json", dir_ + "/").message(),
              HasSubstr("names a directory"));
}

TEST_F(UserPathTest, FileUnderARegularFileIsRefused) {
  std::ofstream(dir_ + "/plain") << "x";
  EXPECT_THAT(CheckWritableFile("--out", dir_ + "/plain/w.pt").message(),
              HasSubstr("Not a directory"));
  EXPECT_THAT(
      CheckWritableDir("--checkpoint_dir", dir_ + "/plain/ck").message(),
      HasSubstr("is not a directory"));
}

TEST_F(UserPathTest, DirectoriesToBeCreatedNeedAWritableAncestor) {
  EXPECT_TRUE(CheckWritableDir("--checkpoint_dir", dir_).ok());
  EXPECT_TRUE(CheckWritableDir("--checkpoint_dir", dir_ + "/a/b/c/").ok());
  if (::geteuid() != 0) {  // root writes anywhere
    ASSERT_EQ(::chmod(dir_.c_str(), 0500), 0);
    absl::Status s = CheckWritableDir("--checkpoint_dir", dir_ + "/a");
    EXPECT_THAT(s.message(), HasSubstr("Permission denied"));
    ::chmod(dir_.c_str(), 0700);
  }
}

}  // namespace
}  // namespace dtrain::base
