#include "base/torch_guard.h"

#include <ATen/ATen.h>

#include <stdexcept>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::base {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

TEST(GuardTorchTest, PassesResultsThrough) {
  EXPECT_TRUE(GuardTorch(absl::StatusCode::kInternal, "x: ", [] {
                return absl::OkStatus();
              }).ok());
  EXPECT_EQ(GuardTorch(absl::StatusCode::kInternal,
                       "x: ", [] { return absl::NotFoundError("n"); }),
            absl::NotFoundError("n"));
  absl::StatusOr<int> v = GuardTorch(absl::StatusCode::kInternal, "x: ", [] {
    return absl::StatusOr<int>(4);
  });
  EXPECT_EQ(*v, 4);
}

TEST(GuardTorchTest, TurnsLibTorchErrorsIntoStatusWithoutBacktrace) {
  absl::StatusOr<int> v = GuardTorch(absl::StatusCode::kInvalidArgument,
                                     "adding: ", []() -> absl::StatusOr<int> {
                                       at::Tensor sum =
                                           at::ones({2}) + at::ones({3});
                                       return static_cast<int>(sum.numel());
                                     });
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(v.status().message()),
              StartsWith("adding: The size of tensor"));
  EXPECT_THAT(std::string(v.status().message()),
              Not(HasSubstr("Exception raised from")));
}

TEST(GuardTorchTest, TurnsStandardExceptionsIntoStatus) {
  absl::Status s = GuardTorch(absl::StatusCode::kResourceExhausted,
                              "alloc: ", []() -> absl::Status {
                                throw std::runtime_error("no memory");
                              });
  EXPECT_EQ(s, absl::ResourceExhaustedError("alloc: no memory"));
}

}  // namespace
}  // namespace dtrain::base
