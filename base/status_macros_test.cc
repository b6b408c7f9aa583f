#include "base/status_macros.h"

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"

namespace dtrain::base {
namespace {

int calls = 0;

absl::Status Count(absl::Status s) {
  ++calls;
  return s;
}

absl::Status TwoSteps(absl::Status first, absl::Status second) {
  DTRAIN_RETURN_IF_ERROR(Count(first));
  DTRAIN_RETURN_IF_ERROR(Count(second));
  return absl::OkStatus();
}

TEST(ReturnIfErrorTest, StopsAtTheFirstError) {
  calls = 0;
  EXPECT_TRUE(TwoSteps(absl::OkStatus(), absl::OkStatus()).ok());
  EXPECT_EQ(calls, 2);
  calls = 0;
  EXPECT_EQ(TwoSteps(absl::NotFoundError("a"), absl::OkStatus()),
            absl::NotFoundError("a"));
  EXPECT_EQ(calls, 1);
}

absl::StatusOr<std::unique_ptr<int>> MakeInt(int v) {
  if (v < 0) return absl::InvalidArgumentError("negative");
  return std::make_unique<int>(v);
}

absl::StatusOr<int> SumOfTwo(int a, int b) {
  // Declares, and assigns to an existing variable; move-only values work.
  DTRAIN_ASSIGN_OR_RETURN(std::unique_ptr<int> x, MakeInt(a));
  std::unique_ptr<int> y;
  DTRAIN_ASSIGN_OR_RETURN(y, MakeInt(b));
  return *x + *y;
}

absl::Status SumIntoStatus(int a, int* out) {
  DTRAIN_ASSIGN_OR_RETURN(std::unique_ptr<int> x, MakeInt(a));
  *out = *x;
  return absl::OkStatus();
}

TEST(AssignOrReturnTest, AssignsValuesAndReturnsErrors) {
  EXPECT_EQ(*SumOfTwo(2, 3), 5);
  EXPECT_EQ(SumOfTwo(-1, 3).status(), absl::InvalidArgumentError("negative"));
  EXPECT_EQ(SumOfTwo(1, -3).status(), absl::InvalidArgumentError("negative"));
  int out = 0;
  EXPECT_TRUE(SumIntoStatus(7, &out).ok());
  EXPECT_EQ(out, 7);
  EXPECT_EQ(SumIntoStatus(-7, &out), absl::InvalidArgumentError("negative"));
}

}  // namespace
}  // namespace dtrain::base
