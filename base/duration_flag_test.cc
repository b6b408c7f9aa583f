// Duration flags: bare seconds as torch.distributed users write them, Abseil's
// unit forms, and refusals that say what was wrong.

#include "base/duration_flag.h"

#include <string>

#include "absl/flags/marshalling.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::base {
namespace {

using ::testing::HasSubstr;

absl::Duration Parse(absl::string_view text) {
  DurationFlag f;
  std::string error;
  EXPECT_TRUE(absl::ParseFlag(text, &f, &error)) << text << ": " << error;
  return f.value;
}

std::string Error(absl::string_view text) {
  DurationFlag f;
  std::string error;
  EXPECT_FALSE(absl::ParseFlag(text, &f, &error)) << text;
  return error;
}

TEST(DurationFlagTest, BareNumbersAreSeconds) {
  EXPECT_EQ(Parse("30"), absl::Seconds(30));
  EXPECT_EQ(Parse("2.5"), absl::Milliseconds(2500));
  EXPECT_EQ(Parse("0"), absl::ZeroDuration());
  EXPECT_EQ(Parse(" 7 "), absl::Seconds(7));
}

TEST(DurationFlagTest, UnitsAsAbseilWritesThem) {
  EXPECT_EQ(Parse("30s"), absl::Seconds(30));
  EXPECT_EQ(Parse("5m"), absl::Minutes(5));
  EXPECT_EQ(Parse("1h30m"), absl::Minutes(90));
  EXPECT_EQ(Parse("250ms"), absl::Milliseconds(250));
  EXPECT_EQ(Parse("inf"), absl::InfiniteDuration());
}

TEST(DurationFlagTest, RefusalsSayWhy) {
  EXPECT_THAT(Error("soon"), HasSubstr("'soon' is not a duration"));
  EXPECT_THAT(Error("30 s"), HasSubstr("is not a duration"));
  EXPECT_THAT(Error("nan"), HasSubstr("is not a duration"));
  EXPECT_THAT(Error("-5"), HasSubstr("'-5' is negative"));
  EXPECT_THAT(Error("-1m"), HasSubstr("negative"));
}

TEST(DurationFlagTest, UnparsesInAbseilsForm) {
  EXPECT_EQ(absl::UnparseFlag(DurationFlag(absl::Seconds(90))), "1m30s");
}

}  // namespace
}  // namespace dtrain::base
