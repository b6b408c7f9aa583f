#include "base/rank_status.h"

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace dtrain::base {
namespace {

TEST(WithRankTest, PrefixesOnce) {
  const absl::Status s = WithRank(3, absl::UnavailableError("peer gone"));
  EXPECT_EQ(s, absl::UnavailableError("[rank 3] peer gone"));
  EXPECT_EQ(WithRank(1, s), s);
  EXPECT_TRUE(WithRank(0, absl::OkStatus()).ok());
}

}  // namespace
}  // namespace dtrain::base
