// The machine-derived bounds against what this process reads itself, and the
// wording of the errors that refuse a value beyond them.

#include "base/machine_limits.h"

#include <sched.h>
#include <sys/resource.h>

#include <cmath>
#include <fstream>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::base {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(MachineLimitsTest, CoresComeFromTheAffinityMask) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  EXPECT_EQ(UsableCores(), CPU_COUNT(&set));
  EXPECT_EQ(ThreadLimit().max, kPerCore * UsableCores());
  EXPECT_THAT(ThreadLimit().why, HasSubstr("this machine's"));
}

TEST(MachineLimitsTest, ProcessesAreBoundedByCoresAndRlimit) {
  const Limit processes = LocalProcessLimit();
  EXPECT_GE(processes.max, 1);
  EXPECT_LE(processes.max, kPerCore * UsableCores());
  EXPECT_LE(processes.max, ProcessLimit().max);
  rlimit nproc{};
  ASSERT_EQ(getrlimit(RLIMIT_NPROC, &nproc), 0);
  if (nproc.rlim_cur != RLIM_INFINITY) {
    EXPECT_LE(ProcessLimit().max, static_cast<int64_t>(nproc.rlim_cur));
  }
  std::ifstream pid_max_file("/proc/sys/kernel/pid_max");
  int64_t pid_max = 0;
  if (pid_max_file >> pid_max) {
    EXPECT_LE(ProcessLimit().max, pid_max);
  }
}

TEST(MachineLimitsTest, MemoryIsPositive) {
  EXPECT_GT(UsableMemoryBytes(), 0);
  EXPECT_EQ(MemoryLimit().max, UsableMemoryBytes());
  EXPECT_THAT(MemoryLimit().why, HasSubstr("GiB"));
}

TEST(MachineLimitsTest, CheckAtMostNamesValueLimitAndWhy) {
  EXPECT_TRUE(CheckAtMost("--workers", 4, {4, "why"}).ok());
  const absl::Status s =
      CheckAtMost("--workers", 100000, {256, "16x this machine's 16 cores"});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "--workers=100000: at most 256 (16x this machine's 16 cores)");
}

TEST(MachineLimitsTest, FiniteSizeRejectsNanInfHugeAndNonPositive) {
  EXPECT_TRUE(CheckFiniteSize("--bucket_cap_mb", 25, 1 << 20, "MiB").ok());
  for (double bad : {std::nan(""), std::numeric_limits<double>::infinity(),
                     -std::numeric_limits<double>::infinity(), 0.0, -1.0}) {
    const absl::Status s =
        CheckFiniteSize("--bucket_cap_mb", bad, 1 << 20, "MiB");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(s.message(), HasSubstr("finite number > 0")) << bad;
  }
  const absl::Status huge =
      CheckFiniteSize("--bucket_cap_mb", 1e300, 1 << 20, "MiB");
  EXPECT_EQ(huge.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(huge.message(),
              AllOf(HasSubstr("--bucket_cap_mb=1e+300"), HasSubstr("at most"),
                    HasSubstr("MiB"), HasSubstr("memory")));
}

TEST(MachineLimitsTest, FixedCaps) {
  EXPECT_EQ(WorldSizeLimit().max, kMaxWorldSize);
  EXPECT_EQ(BatchSizeLimit().max, kMaxBatchSize);
}

TEST(MachineLimitsTest, ParsesCgroupMemoryLimits) {
  EXPECT_EQ(internal::ParseCgroupMemoryLimit("max\n"), -1);
  EXPECT_EQ(internal::ParseCgroupMemoryLimit(""), -1);
  EXPECT_EQ(internal::ParseCgroupMemoryLimit("1073741824\n"), 1073741824);
  EXPECT_EQ(internal::ParseCgroupMemoryLimit("0\n"), -1);
}

}  // namespace
}  // namespace dtrain::base
