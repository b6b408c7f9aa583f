// The shared segment: what one mapping writes another sees, in this process
// and in a child process; a wrong token, a gone creator and garbage are
// refused, each with its own code; and nothing is left in /dev/shm.

#include "dist/backend/shm/segment.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace dtrain::backend::shm {
namespace {

int CountDevShm() {
  int n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
    (void)e;
    ++n;
  }
  return n;
}

TEST(SegmentTest, TwoMappingsShareMemory) {
  absl::StatusOr<std::unique_ptr<Segment>> a = Segment::Create(1000);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_GE((*a)->size(), 1000u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*a)->data()) % 64, 0u);
  absl::StatusOr<std::unique_ptr<Segment>> b = Segment::Attach((*a)->locator());
  ASSERT_TRUE(b.ok()) << b.status();
  std::strcpy(static_cast<char*>((*a)->data()), "hello");
  EXPECT_STREQ(static_cast<const char*>((*b)->data()), "hello");
  // The creator's file may go once attached: the mappings keep the memory.
  (*a)->CloseFile();
  std::strcpy(static_cast<char*>((*b)->data()), "back");
  EXPECT_STREQ(static_cast<const char*>((*a)->data()), "back");
}

TEST(SegmentTest, ChildProcessAttaches) {
  const int before = CountDevShm();
  absl::StatusOr<std::unique_ptr<Segment>> a = Segment::Create(64);
  ASSERT_TRUE(a.ok()) << a.status();
  const std::string locator = (*a)->locator();
  const pid_t child = fork();
  if (child == 0) {
    absl::StatusOr<std::unique_ptr<Segment>> b = Segment::Attach(locator);
    if (!b.ok()) _exit(2);
    std::strcpy(static_cast<char*>((*b)->data()), "from the child");
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_STREQ(static_cast<const char*>((*a)->data()), "from the child");
  EXPECT_EQ(CountDevShm(), before);  // Nothing named to clean up.
}

TEST(SegmentTest, WrongTokenIsRefused) {
  absl::StatusOr<std::unique_ptr<Segment>> a = Segment::Create(64);
  ASSERT_TRUE(a.ok()) << a.status();
  std::vector<std::string> parts = absl::StrSplit((*a)->locator(), ' ');
  parts[3] = parts[3] == "1" ? "2" : "1";
  absl::StatusOr<std::unique_ptr<Segment>> b =
      Segment::Attach(absl::StrJoin(parts, " "));
  EXPECT_EQ(b.status().code(), absl::StatusCode::kFailedPrecondition)
      << b.status();
}

TEST(SegmentTest, CreatorGoneIsUnavailable) {
  std::string locator;
  {
    absl::StatusOr<std::unique_ptr<Segment>> a = Segment::Create(64);
    ASSERT_TRUE(a.ok()) << a.status();
    locator = (*a)->locator();
  }
  absl::StatusOr<std::unique_ptr<Segment>> b = Segment::Attach(locator);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kUnavailable) << b.status();
}

TEST(SegmentTest, GarbageLocatorIsInvalid) {
  for (const char* bad : {"", "1 2 3", "a b c d", "1 2 10 4"}) {
    EXPECT_EQ(Segment::Attach(bad).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

}  // namespace
}  // namespace dtrain::backend::shm
