#include "dist/launch/nnodes_flag.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::launch {
namespace {

TEST(NnodesFlagTest, TakesANumberOrARange) {
  NnodesFlag f;
  std::string error;
  ASSERT_TRUE(AbslParseFlag("3", &f, &error)) << error;
  EXPECT_EQ(f.min, 3);
  EXPECT_EQ(f.max, 3);
  EXPECT_EQ(AbslUnparseFlag(f), "3");
  ASSERT_TRUE(AbslParseFlag("1:4", &f, &error)) << error;
  EXPECT_EQ(f.min, 1);
  EXPECT_EQ(f.max, 4);
  EXPECT_EQ(AbslUnparseFlag(f), "1:4");
  ASSERT_TRUE(AbslParseFlag("2:2", &f, &error)) << error;
  EXPECT_EQ(AbslUnparseFlag(f), "2");
}

TEST(NnodesFlagTest, RefusesGarbageQuotingIt) {
  for (const char* bad :
       {"", "0", "-1", "4:1", "1:", ":2", "1:2:3", "two", "1:x", "0:2"}) {
    NnodesFlag f{7, 9};
    std::string error;
    EXPECT_FALSE(AbslParseFlag(bad, &f, &error)) << bad;
    EXPECT_THAT(error, ::testing::HasSubstr(std::string("'") + bad + "'"));
    EXPECT_EQ(f.min, 7) << "left as it was";
  }
}

}  // namespace
}  // namespace dtrain::launch
