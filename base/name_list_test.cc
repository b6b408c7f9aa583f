#include "base/name_list.h"

#include "gtest/gtest.h"

namespace dtrain::base {
namespace {

TEST(NameListTest, ShowsTheFirstAndCountsTheRest) {
  EXPECT_EQ(JoinFirst({}, 3), "");
  EXPECT_EQ(JoinFirst({"a", "b"}, 3), "a, b");
  EXPECT_EQ(JoinFirst({"a", "b", "c"}, 3), "a, b, c");
  EXPECT_EQ(JoinFirst({"a", "b", "c", "d", "e"}, 3), "a, b, c and 2 more");
  EXPECT_EQ(JoinFirst({"a", "b"}, 0), " and 2 more");
}

}  // namespace
}  // namespace dtrain::base
