// The device guard's policy on any machine, and the CUDA calls where a device
// is visible (skipped elsewhere with the reason).

#include "base/cuda_device.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace dtrain::base {
namespace {

TEST(ShouldRestoreDeviceTest, NeverSwitchesBackToTheSameDevice) {
  EXPECT_FALSE(ShouldRestoreDevice(1, 1, true));
  EXPECT_FALSE(ShouldRestoreDevice(1, 1, absl::nullopt));
}

TEST(ShouldRestoreDeviceTest, DoesNotCreateAContextOnTheCallersDevice) {
  // A fresh thread reports device 0 without a context: restoring it would
  // create one on GPU 0 (the defect this policy exists for).
  EXPECT_FALSE(ShouldRestoreDevice(0, 1, false));
  EXPECT_FALSE(ShouldRestoreDevice(2, 3, false));
}

TEST(ShouldRestoreDeviceTest, RestoresADeviceTheCallerUses) {
  EXPECT_TRUE(ShouldRestoreDevice(0, 1, true));
  EXPECT_TRUE(ShouldRestoreDevice(3, 0, true));
}

TEST(ShouldRestoreDeviceTest, RestoresWhenTheDriverCannotSay) {
  EXPECT_TRUE(ShouldRestoreDevice(0, 1, absl::nullopt));
}

TEST(ShouldRestoreDeviceTest, UnknownPreviousDeviceIsLeftAlone) {
  EXPECT_FALSE(ShouldRestoreDevice(-1, 0, true));
}

TEST(CudaDeviceTest, SetCurrentDeviceRejectsDevicesThatDoNotExist) {
  absl::StatusOr<int> count = CudaDeviceCount();
  if (!count.ok()) {
    EXPECT_EQ(count.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(SetCurrentCudaDevice(0).code(),
              absl::StatusCode::kFailedPrecondition);
    GTEST_SKIP() << count.status().message();
  }
  const absl::Status s = SetCurrentCudaDevice(*count);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find(absl::StrCat("(", *count, " visible)")),
            absl::string_view::npos)
      << s;
  EXPECT_EQ(SetCurrentCudaDevice(-1).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CudaDeviceTest, GuardLeavesNoContextOnAnUnusedDevice) {
  absl::StatusOr<int> count = CudaDeviceCount();
  if (!count.ok()) GTEST_SKIP() << count.status().message();
  if (*count < 2)
    GTEST_SKIP() << "needs 2 CUDA devices, " << *count << " visible";
  if (HasPrimaryContext(0).value_or(true)) {
    GTEST_SKIP() << "device 0 already has a context in this process, or the "
                    "driver cannot say";
  }
  auto guard = std::make_unique<CudaDeviceGuard>(1);
  guard.reset();
  EXPECT_EQ(HasPrimaryContext(0), absl::optional<bool>(false));
  EXPECT_EQ(HasPrimaryContext(1), absl::optional<bool>(true));
}

}  // namespace
}  // namespace dtrain::base
