#include "base/given_flags.h"

#include "gtest/gtest.h"

namespace dtrain::base {
namespace {

TEST(GivenFlagsTest, NamesBeforeTheSeparatorOnly) {
  const char* args[] = {"prog", "--nnodes=2",     "-node_rank",
                        "1",    "--elastic",      "value",
                        "--",   "--master_port=1"};
  RecordGivenFlags(8, const_cast<char**>(args));
  EXPECT_TRUE(FlagGiven("nnodes"));
  EXPECT_TRUE(FlagGiven("node_rank"));
  EXPECT_TRUE(FlagGiven("elastic"));
  EXPECT_FALSE(FlagGiven("1"));
  EXPECT_FALSE(FlagGiven("value"));
  EXPECT_FALSE(FlagGiven("master_port"));
  EXPECT_FALSE(FlagGiven("nproc_per_node"));
}

}  // namespace
}  // namespace dtrain::base
