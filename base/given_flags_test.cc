#include "base/given_flags.h"

#include <cstdlib>
#include <fstream>
#include <string>

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

TEST(GivenFlagsTest, FlagfilesAndEnvironmentCount) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = tmp != nullptr ? tmp : "/tmp";
  const std::string inner = dir + "/inner.flags";
  const std::string outer = dir + "/outer.flags";
  std::ofstream(inner) << "--max_restarts=2\n";
  std::ofstream(outer) << "# a comment\n  --nnodes=1\n// another\n--flagfile="
                       << inner << "\n";
  ASSERT_EQ(setenv("FLAGS_master_addr", "10.0.0.1", 1), 0);
  const std::string flagfile = "--flagfile=" + outer;
  const char* args[] = {"prog", flagfile.c_str(),
                        "--tryfromenv=master_addr,master_port",
                        "--fromenv=elastic"};
  RecordGivenFlags(4, const_cast<char**>(args));
  EXPECT_TRUE(FlagGiven("nnodes"));
  EXPECT_TRUE(FlagGiven("max_restarts"));
  EXPECT_TRUE(FlagGiven("master_addr"));
  EXPECT_FALSE(FlagGiven("master_port"));  // FLAGS_master_port is not set
  EXPECT_TRUE(FlagGiven("elastic"));
  EXPECT_FALSE(FlagGiven("flagfile"));
}

}  // namespace
}  // namespace dtrain::base
