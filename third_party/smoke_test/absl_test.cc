// Abseil smoke test: the parts the project uses at library boundaries (status,
// strings, time).

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace {

absl::StatusOr<int> ParsePositive(int value) {
  if (value <= 0)
    return absl::InvalidArgumentError(absl::StrCat("not positive: ", value));
  return value;
}

TEST(AbslSmokeTest, StatusOrCarriesValueOrError) {
  EXPECT_EQ(*ParsePositive(3), 3);
  absl::StatusOr<int> bad = ParsePositive(-1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "not positive: -1");
}

TEST(AbslSmokeTest, FormatsDurations) {
  EXPECT_EQ(absl::FormatDuration(absl::Seconds(30)), "30s");
  EXPECT_EQ(absl::StrFormat("%.1f MiB", 2.1), "2.1 MiB");
}

}  // namespace
