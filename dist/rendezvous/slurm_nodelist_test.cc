#include "dist/rendezvous/slurm_nodelist.h"

#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::rendezvous {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::SizeIs;

struct ExpandCase {
  std::string list;
  std::vector<std::string> hosts;
};

void PrintTo(const ExpandCase& c, std::ostream* os) { *os << c.list; }

class ExpandSlurmNodeListTest : public ::testing::TestWithParam<ExpandCase> {};

TEST_P(ExpandSlurmNodeListTest, ExpandsInSlurmOrder) {
  absl::StatusOr<std::vector<std::string>> hosts =
      ExpandSlurmNodeList(GetParam().list);
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  EXPECT_THAT(*hosts, ElementsAreArray(GetParam().hosts));
}

INSTANTIATE_TEST_SUITE_P(
    Lists, ExpandSlurmNodeListTest,
    ::testing::Values(
        ExpandCase{"host", {"host"}},
        ExpandCase{"node[01-03,07]", {"node01", "node02", "node03", "node07"}},
        ExpandCase{"a1,b[2-3]", {"a1", "b2", "b3"}},
        // Leftmost group varies slowest, as `scontrol show hostnames`.
        ExpandCase{
            "rack[1-2]-node[01-02]",
            {"rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02"}},
        // Width comes from the range start; wider numbers print in full.
        ExpandCase{"n[8-10]", {"n8", "n9", "n10"}},
        ExpandCase{"n[098-101]", {"n098", "n099", "n100", "n101"}},
        ExpandCase{"n[1-2].ib", {"n1.ib", "n2.ib"}},
        ExpandCase{"n[1-2],m[3],login", {"n1", "n2", "m3", "login"}},
        ExpandCase{"n[3,1]", {"n3", "n1"}}, ExpandCase{"n1,n1", {"n1", "n1"}},
        ExpandCase{"[1-2]", {"1", "2"}}, ExpandCase{"n[0-0]", {"n0"}},
        ExpandCase{"gpu-[1-2]-x[1],cpu", {"gpu-1-x1", "gpu-2-x1", "cpu"}}));

struct BadListCase {
  std::string list;
  std::string why;
};

void PrintTo(const BadListCase& c, std::ostream* os) { *os << c.list; }

class ExpandSlurmNodeListErrorTest
    : public ::testing::TestWithParam<BadListCase> {};

TEST_P(ExpandSlurmNodeListErrorTest, IsInvalidArgumentNamingTheList) {
  absl::StatusOr<std::vector<std::string>> hosts =
      ExpandSlurmNodeList(GetParam().list);
  ASSERT_FALSE(hosts.ok()) << "expanded to " << hosts->size() << " hosts";
  EXPECT_EQ(hosts.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(hosts.status().message()),
              HasSubstr("Slurm node list '" + GetParam().list + "'"));
  EXPECT_THAT(std::string(hosts.status().message()), HasSubstr(GetParam().why));
}

INSTANTIATE_TEST_SUITE_P(
    BadLists, ExpandSlurmNodeListErrorTest,
    ::testing::Values(
        BadListCase{"", "empty"}, BadListCase{"node[1-3", "not closed"},
        BadListCase{"node1-3]", "no matching '['"},
        BadListCase{"node[[1]]", "nested"},
        BadListCase{"node[5-3]", "range '5-3' is reversed"},
        BadListCase{"node[a-b]", "'a-b' in brackets is neither"},
        BadListCase{"node[1-]", "'1-' in brackets"},
        BadListCase{"node[-1]", "'-1' in brackets"},
        BadListCase{"node[1-2-3]", "'1-2-3' in brackets"},
        BadListCase{"node[]", "empty brackets"},
        BadListCase{"node[1,,2]", "empty entry"},
        BadListCase{"a,,b", "empty host"}, BadListCase{"a,", "empty host"},
        BadListCase{",a", "empty host"}, BadListCase{"node 1", "whitespace"},
        BadListCase{"n[1234567890123456789]", "more than 18 digits"},
        BadListCase{"n[0-99999999999999999]", "more than 1000000 hosts"},
        BadListCase{"r[0-999]-n[0-999]-x[0-1]", "more than 1000000 hosts"}));

TEST(ExpandSlurmNodeListLimitTest, CountsEveryHostAgainstTheLimit) {
  EXPECT_THAT(*ExpandSlurmNodeList("n[1-3]-m[1-3]", 9), SizeIs(9));
  EXPECT_FALSE(ExpandSlurmNodeList("n[1-10]", 9).ok());
  EXPECT_FALSE(ExpandSlurmNodeList("n[1-2]-m[1-5]", 9).ok());
  // The limit is on the whole list, not on each host pattern.
  absl::StatusOr<std::vector<std::string>> two =
      ExpandSlurmNodeList("a[1-5],b[1-5]", 9);
  ASSERT_FALSE(two.ok());
  EXPECT_THAT(std::string(two.status().message()),
              HasSubstr("more than 9 hosts"));
}

TEST(ExpandSlurmTasksPerNodeTest, ExpandsRepeats) {
  EXPECT_THAT(*ExpandSlurmTasksPerNode("4"), ElementsAre(4));
  EXPECT_THAT(*ExpandSlurmTasksPerNode("2(x3),1"), ElementsAre(2, 2, 2, 1));
  EXPECT_THAT(*ExpandSlurmTasksPerNode("1,2,3"), ElementsAre(1, 2, 3));
  EXPECT_THAT(*ExpandSlurmTasksPerNode("8(x1)"), ElementsAre(8));
}

TEST(ExpandSlurmTasksPerNodeTest, RejectsMalformedLists) {
  for (const std::string spec : {"", "x", "-1", "2(x0)", "2(3)", "2(x3",
                                 "2(x3),", "2(xa)", "1.5", "1(x2000000)"}) {
    SCOPED_TRACE(spec);
    absl::StatusOr<std::vector<int>> counts = ExpandSlurmTasksPerNode(spec);
    ASSERT_FALSE(counts.ok());
    EXPECT_EQ(counts.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(counts.status().message()),
                HasSubstr("Slurm tasks per node '" + spec + "'"));
  }
}

}  // namespace
}  // namespace dtrain::rendezvous
