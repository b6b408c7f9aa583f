#include "base/open_file_limit.h"

#include <sys/resource.h>

#include "gtest/gtest.h"

namespace dtrain::base {
namespace {

TEST(OpenFileLimitTest, RaisesTheSoftLimitToTheHardOne) {
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  if (saved.rlim_max < 64) GTEST_SKIP() << "hard limit " << saved.rlim_max;
  rlimit lowered = saved;
  lowered.rlim_cur = 64;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &lowered), 0);
  absl::StatusOr<int64_t> now = RaiseOpenFileLimit();
  ASSERT_TRUE(now.ok()) << now.status();
  rlimit after{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &after), 0);
  EXPECT_EQ(after.rlim_cur, saved.rlim_max);
  if (saved.rlim_max != RLIM_INFINITY) {
    EXPECT_EQ(*now, static_cast<int64_t>(saved.rlim_max));
  }
  // Already raised: nothing changes.
  EXPECT_EQ(*RaiseOpenFileLimit(), *now);
  ::setrlimit(RLIMIT_NOFILE, &saved);
}

}  // namespace
}  // namespace dtrain::base
