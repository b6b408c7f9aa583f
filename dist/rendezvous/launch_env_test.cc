#include "dist/rendezvous/launch_env.h"

#include <stdlib.h>

#include <fstream>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/machine_limits.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::rendezvous {
namespace {

using ::testing::HasSubstr;

// `base` with `extra` added, `extra` winning.
EnvMap With(EnvMap base, const EnvMap& extra) {
  for (const auto& [name, value] : extra) base[name] = value;
  return base;
}

// Builds ExplicitArgs in table rows: Args().Rank(1).WorldSize(2).
class Args {
 public:
  Args& Rank(int v) {
    args_.rank = v;
    return *this;
  }
  Args& WorldSize(int v) {
    args_.world_size = v;
    return *this;
  }
  Args& LocalRank(int v) {
    args_.local_rank = v;
    return *this;
  }
  Args& LocalWorldSize(int v) {
    args_.local_world_size = v;
    return *this;
  }
  Args& MasterAddr(std::string v) {
    args_.master_addr = std::move(v);
    return *this;
  }
  Args& MasterPort(int v) {
    args_.master_port = v;
    return *this;
  }
  operator ExplicitArgs() const { return args_; }  // NOLINT: table rows

 private:
  ExplicitArgs args_;
};

const EnvMap kTorchrunEnv = {{"RANK", "3"},
                             {"WORLD_SIZE", "8"},
                             {"LOCAL_RANK", "1"},
                             {"LOCAL_WORLD_SIZE", "4"},
                             {"MASTER_ADDR", "10.0.0.1"},
                             {"MASTER_PORT", "1234"}};
const EnvMap kOpenMpiEnv = {{"OMPI_COMM_WORLD_RANK", "5"},
                            {"OMPI_COMM_WORLD_SIZE", "8"},
                            {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                            {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}};
const EnvMap kMpichEnv = {{"PMI_RANK", "6"},
                          {"PMI_SIZE", "8"},
                          {"MPI_LOCALRANKID", "2"},
                          {"MPI_LOCALNRANKS", "4"}};
const EnvMap kSlurmEnv = {{"SLURM_PROCID", "7"},
                          {"SLURM_NTASKS", "8"},
                          {"SLURM_LOCALID", "3"},
                          {"SLURM_NODEID", "1"},
                          {"SLURM_STEP_TASKS_PER_NODE", "4(x2)"},
                          {"SLURM_JOB_NODELIST", "gpu[07-08]"}};

struct Want {
  int rank;
  int world_size;
  int local_rank;
  int local_world_size;
  std::string master_addr;
  int master_port;
  LaunchSource source;
  std::string master_addr_from;
  std::string master_port_from;
  bool local_inferred;
};

struct DiscoverCase {
  std::string name;
  EnvMap env;
  ExplicitArgs args;
  Want want;
};

void ExpectLaunchEnv(const LaunchEnv& got, const Want& want) {
  EXPECT_EQ(got.rank, want.rank);
  EXPECT_EQ(got.world_size, want.world_size);
  EXPECT_EQ(got.local_rank, want.local_rank);
  EXPECT_EQ(got.local_world_size, want.local_world_size);
  EXPECT_EQ(got.master_addr, want.master_addr);
  EXPECT_EQ(got.master_port, want.master_port);
  EXPECT_EQ(got.source_name(), LaunchSourceName(want.source));
  EXPECT_EQ(got.master_addr_from, want.master_addr_from);
  EXPECT_EQ(got.master_port_from, want.master_port_from);
  EXPECT_EQ(got.local_inferred, want.local_inferred);
}

void PrintTo(const DiscoverCase& c, std::ostream* os) { *os << c.name; }

class DiscoverLaunchEnvTest : public ::testing::TestWithParam<DiscoverCase> {};

TEST_P(DiscoverLaunchEnvTest, FindsRankWorldAndMaster) {
  absl::StatusOr<LaunchEnv> got =
      DiscoverLaunchEnv(GetParam().env, GetParam().args);
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectLaunchEnv(*got, GetParam().want);
}

constexpr LaunchSource kExplicit = LaunchSource::kExplicit;
constexpr LaunchSource kTorchrun = LaunchSource::kTorchrun;
constexpr LaunchSource kOpenMpi = LaunchSource::kOpenMpi;
constexpr LaunchSource kMpich = LaunchSource::kMpich;
constexpr LaunchSource kSlurm = LaunchSource::kSlurm;
constexpr LaunchSource kSingle = LaunchSource::kSingleProcess;

INSTANTIATE_TEST_SUITE_P(
    Sources, DiscoverLaunchEnvTest,
    ::testing::Values(
        DiscoverCase{"Empty",
                     {},
                     Args(),
                     {0, 1, 0, 1, "127.0.0.1", 29500, kSingle, "default",
                      "default", true}},
        DiscoverCase{"Torchrun",
                     kTorchrunEnv,
                     Args(),
                     {3, 8, 1, 4, "10.0.0.1", 1234, kTorchrun, "MASTER_ADDR",
                      "MASTER_PORT", false}},
        DiscoverCase{"TorchrunWithoutLocalAssumesOneNode",
                     {{"RANK", "2"}, {"WORLD_SIZE", "4"}},
                     Args(),
                     {2, 4, 2, 4, "127.0.0.1", 29500, kTorchrun, "default",
                      "default", true}},
        DiscoverCase{"OpenMpi",
                     kOpenMpiEnv,
                     Args(),
                     {5, 8, 1, 4, "127.0.0.1", 29500, kOpenMpi, "default",
                      "default", false}},
        DiscoverCase{"OpenMpiTakesMasterFromEnv",
                     With(kOpenMpiEnv,
                          {{"MASTER_ADDR", "head"}, {"MASTER_PORT", "4000"}}),
                     Args(),
                     {5, 8, 1, 4, "head", 4000, kOpenMpi, "MASTER_ADDR",
                      "MASTER_PORT", false}},
        DiscoverCase{"Mpich",
                     kMpichEnv,
                     Args(),
                     {6, 8, 2, 4, "127.0.0.1", 29500, kMpich, "default",
                      "default", false}},
        DiscoverCase{"MpichWithoutLocalIds",
                     {{"PMI_RANK", "3"}, {"PMI_SIZE", "4"}},
                     Args(),
                     {3, 4, 3, 4, "127.0.0.1", 29500, kMpich, "default",
                      "default", true}},
        DiscoverCase{"Slurm",
                     kSlurmEnv,
                     Args(),
                     {7, 8, 3, 4, "gpu07", 29500, kSlurm, "SLURM_JOB_NODELIST",
                      "default", false}},
        DiscoverCase{"SlurmUnevenNodesUseTasksPerNode",
                     {{"SLURM_PROCID", "5"},
                      {"SLURM_NTASKS", "6"},
                      {"SLURM_LOCALID", "1"},
                      {"SLURM_NODEID", "1"},
                      {"SLURM_TASKS_PER_NODE", "4,2"},
                      {"SLURM_NTASKS_PER_NODE", "4"},
                      {"SLURM_NODELIST", "n1,n2"}},
                     Args(),
                     {5, 6, 1, 2, "n1", 29500, kSlurm, "SLURM_NODELIST",
                      "default", false}},
        DiscoverCase{"SlurmStepTasksPerNodeBeatsJobs",
                     With(kSlurmEnv, {{"SLURM_TASKS_PER_NODE", "8"}}),
                     Args(),
                     {7, 8, 3, 4, "gpu07", 29500, kSlurm, "SLURM_JOB_NODELIST",
                      "default", false}},
        DiscoverCase{"SlurmNtasksPerNode",
                     {{"SLURM_PROCID", "2"},
                      {"SLURM_NTASKS", "4"},
                      {"SLURM_LOCALID", "0"},
                      {"SLURM_NTASKS_PER_NODE", "2"}},
                     Args(),
                     {2, 4, 0, 2, "127.0.0.1", 29500, kSlurm, "default",
                      "default", false}},
        DiscoverCase{"SlurmStepNodeListBeatsJobs",
                     With(kSlurmEnv, {{"SLURM_STEP_NODELIST", "gpu08"}}),
                     Args(),
                     {7, 8, 3, 4, "gpu08", 29500, kSlurm, "SLURM_STEP_NODELIST",
                      "default", false}},
        DiscoverCase{
            "SlurmMultiGroupNodeList",
            With(kSlurmEnv, {{"SLURM_JOB_NODELIST", "rack[2-3]-node[01-02]"}}),
            Args(),
            {7, 8, 3, 4, "rack2-node01", 29500, kSlurm, "SLURM_JOB_NODELIST",
             "default", false}},
        DiscoverCase{
            "SlurmMasterAddrEnvBeatsNodeList",
            With(kSlurmEnv, {{"MASTER_ADDR", "login"}, {"MASTER_PORT", "7"}}),
            Args(),
            {7, 8, 3, 4, "login", 7, kSlurm, "MASTER_ADDR", "MASTER_PORT",
             false}},
        DiscoverCase{"SallocShellIsNotATask",
                     {{"SLURM_NTASKS", "8"}, {"SLURM_JOB_NODELIST", "n[1-2]"}},
                     Args(),
                     {0, 1, 0, 1, "127.0.0.1", 29500, kSingle, "default",
                      "default", true}},
        DiscoverCase{"TorchrunBeatsSlurm",
                     With(kSlurmEnv, kTorchrunEnv),
                     Args(),
                     {3, 8, 1, 4, "10.0.0.1", 1234, kTorchrun, "MASTER_ADDR",
                      "MASTER_PORT", false}},
        DiscoverCase{"TorchrunBeatsOpenMpi",
                     With(kOpenMpiEnv, kTorchrunEnv),
                     Args(),
                     {3, 8, 1, 4, "10.0.0.1", 1234, kTorchrun, "MASTER_ADDR",
                      "MASTER_PORT", false}},
        DiscoverCase{"OpenMpiBeatsMpichAndSlurm",
                     With(With(kSlurmEnv, kMpichEnv), kOpenMpiEnv),
                     Args(),
                     {5, 8, 1, 4, "127.0.0.1", 29500, kOpenMpi, "default",
                      "default", false}},
        DiscoverCase{"MpichBeatsSlurm",
                     With(kSlurmEnv, kMpichEnv),
                     Args(),
                     {6, 8, 2, 4, "127.0.0.1", 29500, kMpich, "default",
                      "default", false}},
        DiscoverCase{
            "ExplicitBeatsEverything",
            With(kSlurmEnv, kTorchrunEnv),
            Args()
                .Rank(1)
                .WorldSize(2)
                .LocalRank(0)
                .LocalWorldSize(1)
                .MasterAddr("h")
                .MasterPort(99),
            {1, 2, 0, 1, "h", 99, kExplicit, "explicit", "explicit", false}},
        DiscoverCase{"ExplicitRankKeepsLauncherLocalAndMaster",
                     kTorchrunEnv,
                     Args().Rank(0).WorldSize(16),
                     {0, 16, 1, 4, "10.0.0.1", 1234, kExplicit, "MASTER_ADDR",
                      "MASTER_PORT", false}},
        DiscoverCase{"ExplicitPortOverridesTorchrun",
                     kTorchrunEnv,
                     Args().MasterPort(4000),
                     {3, 8, 1, 4, "10.0.0.1", 4000, kTorchrun, "MASTER_ADDR",
                      "explicit", false}},
        DiscoverCase{"ExplicitLocalRankOverridesOpenMpi",
                     kOpenMpiEnv,
                     Args().LocalRank(3),
                     {5, 8, 3, 4, "127.0.0.1", 29500, kOpenMpi, "default",
                      "default", false}},
        DiscoverCase{"ExplicitAddrOverridesSlurmNodeList",
                     kSlurmEnv,
                     Args().MasterAddr("10.1.1.1"),
                     {7, 8, 3, 4, "10.1.1.1", 29500, kSlurm, "explicit",
                      "default", false}},
        DiscoverCase{"OverriddenVariableIsNotRead",
                     {{"RANK", "abc"}, {"WORLD_SIZE", "4"}},
                     Args().Rank(1),
                     {1, 4, 1, 4, "127.0.0.1", 29500, kTorchrun, "default",
                      "default", true}},
        DiscoverCase{
            "OverriddenNodeListIsNotRead",
            With(kSlurmEnv, {{"SLURM_JOB_NODELIST", "bad[1-"}}),
            Args().MasterAddr("h"),
            {7, 8, 3, 4, "h", 29500, kSlurm, "explicit", "default", false}},
        DiscoverCase{"ExplicitWithoutLauncher",
                     {},
                     Args().Rank(2).WorldSize(3),
                     {2, 3, 2, 3, "127.0.0.1", 29500, kExplicit, "default",
                      "default", true}},
        // The AWS tutorial's explicit form on 2 nodes x 2 GPUs.
        DiscoverCase{"ExplicitLocalRankAndLocalWorldSize",
                     {},
                     Args().Rank(3).WorldSize(4).LocalRank(1).LocalWorldSize(2),
                     {3, 4, 1, 2, "127.0.0.1", 29500, kExplicit, "default",
                      "default", false}},
        DiscoverCase{"ExplicitLocalRankTakesLocalWorldSizeFromEnv",
                     {{"LOCAL_WORLD_SIZE", "2"}},
                     Args().Rank(3).WorldSize(4).LocalRank(1),
                     {3, 4, 1, 2, "127.0.0.1", 29500, kExplicit, "default",
                      "default", false}},
        DiscoverCase{"ExplicitLocalWorldSizeBeatsEnv",
                     {{"LOCAL_WORLD_SIZE", "abc"}},
                     Args().Rank(3).WorldSize(4).LocalRank(1).LocalWorldSize(2),
                     {3, 4, 1, 2, "127.0.0.1", 29500, kExplicit, "default",
                      "default", false}},
        DiscoverCase{"ExplicitLocalRankUnderSlurmWithoutTasksPerNodeTakesEnv",
                     {{"SLURM_PROCID", "7"},
                      {"SLURM_NTASKS", "8"},
                      {"SLURM_JOB_NODELIST", "gpu[07-08]"},
                      {"LOCAL_WORLD_SIZE", "4"}},
                     Args().LocalRank(2),
                     {7, 8, 2, 4, "gpu07", 29500, kSlurm, "SLURM_JOB_NODELIST",
                      "default", false}},
        DiscoverCase{
            "MasterVariablesAloneAreNotALauncher",
            {{"MASTER_ADDR", "h"}, {"MASTER_PORT", "5"}},
            Args(),
            {0, 1, 0, 1, "h", 5, kSingle, "MASTER_ADDR", "MASTER_PORT", true}},
        DiscoverCase{"LocalRankAloneIsNotALauncher",
                     {{"LOCAL_RANK", "3"}},
                     Args(),
                     {0, 1, 0, 1, "127.0.0.1", 29500, kSingle, "default",
                      "default", true}}),
    [](const ::testing::TestParamInfo<DiscoverCase>& info) {
      return info.param.name;
    });

struct BadEnvCase {
  std::string name;
  EnvMap env;
  ExplicitArgs args;
  std::string why;
};

void PrintTo(const BadEnvCase& c, std::ostream* os) { *os << c.name; }

class DiscoverLaunchEnvErrorTest : public ::testing::TestWithParam<BadEnvCase> {
};

TEST_P(DiscoverLaunchEnvErrorTest, IsInvalidArgumentNamingTheVariable) {
  absl::StatusOr<LaunchEnv> got =
      DiscoverLaunchEnv(GetParam().env, GetParam().args);
  ASSERT_FALSE(got.ok()) << "discovered " << got->ToString();
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(got.status().message()), HasSubstr(GetParam().why));
}

// Issue #29: more ranks on this node than processes can run here.
TEST(DiscoverLaunchEnvTest, LocalWorldSizeBeyondTheProcessLimitIsRefused) {
  const base::Limit processes = base::ProcessLimit();
  if (processes.max >= base::kMaxWorldSize) {
    GTEST_SKIP() << "this machine runs " << processes.max << " processes";
  }
  const std::string local = std::to_string(processes.max + 1);
  absl::StatusOr<LaunchEnv> got =
      DiscoverLaunchEnv({{"RANK", "0"},
                         {"WORLD_SIZE", std::to_string(base::kMaxWorldSize)},
                         {"LOCAL_RANK", "0"},
                         {"LOCAL_WORLD_SIZE", local}},
                        Args());
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      got.status().message(),
      absl::StrCat("LOCAL_WORLD_SIZE=", local, ": at most ", processes.max,
                   " processes run on this machine (", processes.why, ")"));
}

// Without a local world size the world size stands in for it, and may span
// many nodes: it is not held to this machine's processes.
TEST(DiscoverLaunchEnvTest, InferredLocalWorldSizeIsNotHeldToTheMachine) {
  absl::StatusOr<LaunchEnv> got = DiscoverLaunchEnv(
      {{"RANK", "0"}, {"WORLD_SIZE", std::to_string(base::kMaxWorldSize)}},
      Args());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->local_inferred);
  EXPECT_EQ(got->world_size, base::kMaxWorldSize);
}

const EnvMap kTwoRanks = {{"RANK", "0"}, {"WORLD_SIZE", "2"}};

INSTANTIATE_TEST_SUITE_P(
    BadEnvironments, DiscoverLaunchEnvErrorTest,
    ::testing::Values(
        BadEnvCase{"RankNotInteger",
                   {{"RANK", "abc"}, {"WORLD_SIZE", "2"}},
                   Args(),
                   "RANK='abc' is not an integer"},
        BadEnvCase{"RankFraction",
                   {{"RANK", "1.5"}, {"WORLD_SIZE", "2"}},
                   Args(),
                   "RANK='1.5' is not an integer"},
        BadEnvCase{"RankWithSpace",
                   {{"RANK", " 1"}, {"WORLD_SIZE", "2"}},
                   Args(),
                   "RANK=' 1' is not an integer"},
        BadEnvCase{"RankOverflow",
                   {{"RANK", "99999999999"}, {"WORLD_SIZE", "2"}},
                   Args(),
                   "RANK='99999999999' is out of range"},
        BadEnvCase{"WorldSizeEmpty",
                   {{"RANK", "0"}, {"WORLD_SIZE", ""}},
                   Args(),
                   "WORLD_SIZE='' is not an integer"},
        BadEnvCase{"RankWithoutWorldSize",
                   {{"RANK", "1"}},
                   Args(),
                   "torchrun environment is incomplete: WORLD_SIZE is not "
                   "set, though RANK=1 is"},
        BadEnvCase{"WorldSizeWithoutRank",
                   {{"WORLD_SIZE", "2"}},
                   Args(),
                   "torchrun environment is incomplete: RANK is not set"},
        BadEnvCase{"RankEqualsWorldSize",
                   {{"RANK", "2"}, {"WORLD_SIZE", "2"}},
                   Args(),
                   "RANK=2 is not less than WORLD_SIZE=2"},
        BadEnvCase{"NegativeRank",
                   {{"RANK", "-1"}, {"WORLD_SIZE", "2"}},
                   Args(),
                   "RANK=-1 is negative"},
        BadEnvCase{"ZeroWorldSize",
                   {{"RANK", "0"}, {"WORLD_SIZE", "0"}},
                   Args(),
                   "WORLD_SIZE=0 is below 1"},
        // Issue #29: a world size no job has, refused before the
        // rendezvous does per-rank work for it.
        BadEnvCase{"WorldSizeAboveTheCap",
                   {{"RANK", "0"}, {"WORLD_SIZE", "2000000000"}},
                   Args(),
                   "WORLD_SIZE=2000000000: at most 1048576 (a fixed cap on "
                   "the ranks of one job)"},
        BadEnvCase{"OpenMpiWorldSizeAboveTheCap",
                   {{"OMPI_COMM_WORLD_RANK", "0"},
                    {"OMPI_COMM_WORLD_SIZE", "1048577"}},
                   Args(),
                   "OMPI_COMM_WORLD_SIZE=1048577: at most 1048576"},
        BadEnvCase{"SlurmWorldSizeAboveTheCap",
                   {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1048577"}},
                   Args(),
                   "SLURM_NTASKS=1048577: at most 1048576"},
        BadEnvCase{"ExplicitWorldSizeAboveTheCap",
                   {},
                   Args().Rank(0).WorldSize(1048577),
                   "explicit world_size=1048577: at most 1048576"},
        BadEnvCase{
            "LocalRankEqualsLocalWorldSize",
            With(kTwoRanks, {{"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}}),
            Args(), "LOCAL_RANK=2 is not less than LOCAL_WORLD_SIZE=2"},
        BadEnvCase{
            "NegativeLocalRank",
            With(kTwoRanks, {{"LOCAL_RANK", "-1"}, {"LOCAL_WORLD_SIZE", "2"}}),
            Args(), "LOCAL_RANK=-1 is negative"},
        BadEnvCase{
            "LocalWorldSizeAboveWorldSize",
            With(kTwoRanks, {{"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "4"}}),
            Args(), "LOCAL_WORLD_SIZE=4 is greater than WORLD_SIZE=2"},
        BadEnvCase{
            "ZeroLocalWorldSize",
            With(kTwoRanks, {{"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "0"}}),
            Args(), "LOCAL_WORLD_SIZE=0 is below 1"},
        BadEnvCase{"LocalRankWithoutLocalWorldSize",
                   With(kTwoRanks, {{"LOCAL_RANK", "1"}}), Args(),
                   "LOCAL_WORLD_SIZE is not set, though LOCAL_RANK=1 is"},
        BadEnvCase{"LocalWorldSizeWithoutLocalRank",
                   With(kTwoRanks, {{"LOCAL_WORLD_SIZE", "2"}}), Args(),
                   "LOCAL_RANK is not set, though LOCAL_WORLD_SIZE=2 is"},
        BadEnvCase{"MasterPortNotInteger",
                   With(kTwoRanks, {{"MASTER_PORT", "http"}}), Args(),
                   "MASTER_PORT='http' is not an integer"},
        BadEnvCase{"MasterPortTooLarge",
                   With(kTwoRanks, {{"MASTER_PORT", "70000"}}), Args(),
                   "MASTER_PORT=70000 is outside 1..65535"},
        BadEnvCase{"MasterPortZero", With(kTwoRanks, {{"MASTER_PORT", "0"}}),
                   Args(), "MASTER_PORT=0 is outside 1..65535"},
        BadEnvCase{"MasterAddrEmpty", With(kTwoRanks, {{"MASTER_ADDR", ""}}),
                   Args(), "MASTER_ADDR is set but empty"},
        BadEnvCase{"OpenMpiRankNotInteger",
                   With(kOpenMpiEnv, {{"OMPI_COMM_WORLD_RANK", "x"}}), Args(),
                   "OMPI_COMM_WORLD_RANK='x' is not an integer"},
        BadEnvCase{"OpenMpiWithoutSize",
                   {{"OMPI_COMM_WORLD_RANK", "1"}},
                   Args(),
                   "Open MPI environment is incomplete: OMPI_COMM_WORLD_SIZE "
                   "is not set"},
        BadEnvCase{"OpenMpiLocalSizeWithoutLocalRank",
                   {{"OMPI_COMM_WORLD_RANK", "1"},
                    {"OMPI_COMM_WORLD_SIZE", "2"},
                    {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}},
                   Args(),
                   "OMPI_COMM_WORLD_LOCAL_RANK is not set"},
        BadEnvCase{"MpichWithoutRank",
                   {{"PMI_SIZE", "4"}},
                   Args(),
                   "MPICH/PMI environment is incomplete: PMI_RANK is not set"},
        BadEnvCase{"MpichRankTooLarge",
                   {{"PMI_RANK", "4"}, {"PMI_SIZE", "4"}},
                   Args(),
                   "PMI_RANK=4 is not less than PMI_SIZE=4"},
        BadEnvCase{"SlurmWithoutNtasks",
                   {{"SLURM_PROCID", "0"}},
                   Args(),
                   "Slurm environment is incomplete: SLURM_NTASKS is not set"},
        BadEnvCase{"SlurmBadNodeList",
                   With(kSlurmEnv, {{"SLURM_JOB_NODELIST", "node[1-"}}), Args(),
                   "SLURM_JOB_NODELIST: Slurm node list 'node[1-'"},
        BadEnvCase{"SlurmLocalIdWithoutTasksPerNode",
                   {{"SLURM_PROCID", "0"},
                    {"SLURM_NTASKS", "2"},
                    {"SLURM_LOCALID", "0"}},
                   Args(),
                   "SLURM_STEP_TASKS_PER_NODE or SLURM_TASKS_PER_NODE (with "
                   "SLURM_NODEID), or SLURM_NTASKS_PER_NODE is not set"},
        BadEnvCase{"SlurmNodeIdOutsideTasksPerNode",
                   With(kSlurmEnv, {{"SLURM_NODEID", "2"}}), Args(),
                   "SLURM_NODEID=2 is outside "
                   "SLURM_STEP_TASKS_PER_NODE='4(x2)', which lists 2 nodes"},
        BadEnvCase{"SlurmBadTasksPerNode",
                   With(kSlurmEnv, {{"SLURM_STEP_TASKS_PER_NODE", "four"}}),
                   Args(),
                   "SLURM_STEP_TASKS_PER_NODE: Slurm tasks per node 'four'"},
        BadEnvCase{"SlurmProcIdTooLarge",
                   With(kSlurmEnv, {{"SLURM_PROCID", "8"}}), Args(),
                   "SLURM_PROCID=8 is not less than SLURM_NTASKS=8"},
        BadEnvCase{"SlurmLocalIdTooLarge",
                   With(kSlurmEnv, {{"SLURM_LOCALID", "4"}}), Args(),
                   "SLURM_LOCALID=4 is not less than local world size 4 "
                   "(SLURM_STEP_TASKS_PER_NODE='4(x2)' at SLURM_NODEID=1)"},
        BadEnvCase{"ExplicitRankWithoutWorldSize",
                   {},
                   Args().Rank(3),
                   "explicit rank=3 needs world_size too: pass --world_size; "
                   "no launcher environment"},
        BadEnvCase{"ExplicitWorldSizeWithoutRank",
                   {},
                   Args().WorldSize(2),
                   "explicit world_size=2 needs rank too: pass --rank"},
        BadEnvCase{"ExplicitRankTooLarge",
                   {},
                   Args().Rank(5).WorldSize(4),
                   "explicit rank=5 is not less than explicit world_size=4"},
        BadEnvCase{"ExplicitRankAboveEnvWorldSize", kTorchrunEnv,
                   Args().Rank(8),
                   "explicit rank=8 is not less than WORLD_SIZE=8"},
        BadEnvCase{"ExplicitLocalRankWithoutLocalSize",
                   {},
                   Args().Rank(0).WorldSize(2).LocalRank(1),
                   "explicit local_rank=1 needs local_world_size too: pass "
                   "--local_world_size (the number of ranks on this node) or "
                   "set LOCAL_WORLD_SIZE; no launcher environment (torchrun, "
                   "Open MPI, MPICH, Slurm) supplies it"},
        BadEnvCase{"ExplicitLocalWorldSizeWithoutLocalRank",
                   {},
                   Args().Rank(0).WorldSize(2).LocalWorldSize(2),
                   "explicit local_world_size=2 needs local_rank too: pass "
                   "--local_rank; no launcher environment"},
        BadEnvCase{"ExplicitLocalRankAboveEnvLocalWorldSize",
                   {{"LOCAL_WORLD_SIZE", "1"}},
                   Args().Rank(0).WorldSize(2).LocalRank(1),
                   "explicit local_rank=1 is not less than LOCAL_WORLD_SIZE=1"},
        BadEnvCase{"ExplicitLocalRankWithBadEnvLocalWorldSize",
                   {{"LOCAL_WORLD_SIZE", "two"}},
                   Args().Rank(0).WorldSize(2).LocalRank(1),
                   "LOCAL_WORLD_SIZE='two' is not an integer"},
        BadEnvCase{"ExplicitLocalRankUnderSlurmWithoutTasksPerNode",
                   {{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}},
                   Args().LocalRank(1),
                   "explicit local_rank=1 needs local_world_size too: pass "
                   "--local_world_size (the number of ranks on this node) or "
                   "set LOCAL_WORLD_SIZE; the Slurm environment does not "
                   "supply it (SLURM_STEP_TASKS_PER_NODE or "
                   "SLURM_TASKS_PER_NODE (with SLURM_NODEID), or "
                   "SLURM_NTASKS_PER_NODE is not set)"},
        BadEnvCase{"ExplicitPortZero",
                   {},
                   Args().MasterPort(0),
                   "explicit master_port=0 is outside 1..65535"},
        BadEnvCase{"ExplicitAddrEmpty",
                   {},
                   Args().MasterAddr(""),
                   "explicit master_addr is empty"}),
    [](const ::testing::TestParamInfo<BadEnvCase>& info) {
      return info.param.name;
    });

TEST(LaunchEnvTest, ToStringSaysWhoAndWhere) {
  absl::StatusOr<LaunchEnv> env = DiscoverLaunchEnv(kSlurmEnv, Args());
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->ToString(),
            "rank 7 of 8 (local 3 of 4) from slurm, master gpu07:29500 "
            "(SLURM_JOB_NODELIST, default)");
  // For tcp:// and file://, which do not use the master.
  EXPECT_EQ(env->PlacementString(), "rank 7 of 8 (local 3 of 4) from slurm");
}

TEST(LaunchEnvTest, ToStringBracketsIpv6AndFlagsAssumedLocal) {
  absl::StatusOr<LaunchEnv> env =
      DiscoverLaunchEnv({{"MASTER_ADDR", "::1"}}, Args());
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->ToString(),
            "rank 0 of 1 (local 0 of 1, assuming one node) from single "
            "process, master [::1]:29500 (MASTER_ADDR, default)");
}

TEST(LaunchEnvTest, TorchrunsAgentStoreAndRestarts) {
  const EnvMap torchrun = {{"RANK", "1"},
                           {"WORLD_SIZE", "2"},
                           {"MASTER_ADDR", "10.0.0.1"},
                           {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                           {"TORCHELASTIC_RESTART_COUNT", "2"}};
  absl::StatusOr<LaunchEnv> env = DiscoverLaunchEnv(torchrun, Args());
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_TRUE(env->agent_store);
  EXPECT_EQ(env->restart_count, 2);
  // PyTorch's test is the exact text "True".
  env = DiscoverLaunchEnv(
      With(torchrun, {{"TORCHELASTIC_USE_AGENT_STORE", "true"}}), Args());
  EXPECT_FALSE(env->agent_store);
  // Only torchrun's ranks use its agent's store.
  env = DiscoverLaunchEnv(
      With(kSlurmEnv, {{"TORCHELASTIC_USE_AGENT_STORE", "True"}}), Args());
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_FALSE(env->agent_store);
  // The project's launcher's count comes first.
  EXPECT_EQ(*RestartCount({{"DTRAIN_RESTART_COUNT", "1"},
                           {"TORCHELASTIC_RESTART_COUNT", "3"}}),
            1);
  EXPECT_EQ(*RestartCount({}), 0);
  EXPECT_THAT(std::string(RestartCount({{"TORCHELASTIC_RESTART_COUNT", "x"}})
                              .status()
                              .message()),
              HasSubstr("TORCHELASTIC_RESTART_COUNT='x' is not an integer"));
  EXPECT_THAT(
      std::string(
          RestartCount({{"DTRAIN_RESTART_COUNT", "-1"}}).status().message()),
      HasSubstr("DTRAIN_RESTART_COUNT=-1 is negative"));
}

// Volcano's pytorch plugin: MASTER_ADDR, MASTER_PORT, WORLD_SIZE (pods) and
// RANK per pod; the kubelet's KUBERNETES_SERVICE_HOST in every pod.
TEST(LaunchEnvTest, AnOperatorsPodRunsOneProcess) {
  const EnvMap pod = {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"},
                      {"VC_TASK_INDEX", "1"},
                      {"MASTER_ADDR", "vj-master-0.vj"},
                      {"MASTER_PORT", "23456"},
                      {"WORLD_SIZE", "3"},
                      {"RANK", "2"}};
  absl::StatusOr<LaunchEnv> env = DiscoverLaunchEnv(pod, Args());
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->source, LaunchSource::kKubernetes);
  EXPECT_EQ(env->rank, 2);
  EXPECT_EQ(env->world_size, 3);
  EXPECT_EQ(env->local_rank, 0);
  EXPECT_EQ(env->local_world_size, 1);
  EXPECT_FALSE(env->local_inferred);
  EXPECT_EQ(env->master_addr, "vj-master-0.vj");
  EXPECT_EQ(env->master_port, 23456);
  EXPECT_EQ(env->PlacementString(),
            "rank 2 of 3 (local 0 of 1) from kubernetes");

  // A launcher in the pod (launch, torchrun) sets the local rank: its ranks.
  env = DiscoverLaunchEnv(
      With(pod, {{"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"}}), Args());
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->source, LaunchSource::kTorchrun);
  EXPECT_EQ(env->local_rank, 1);

  // PyTorchJob's nprocPerNode: RANK is the pod's, the ranks a launcher's.
  env = DiscoverLaunchEnv(With(pod, {{"PET_NPROC_PER_NODE", "2"}}), Args());
  ASSERT_FALSE(env.ok());
  EXPECT_THAT(std::string(env.status().message()),
              HasSubstr("PET_NPROC_PER_NODE='2' asks for a launcher"));
  env = DiscoverLaunchEnv(With(pod, {{"PET_NPROC_PER_NODE", "auto"}}), Args());
  EXPECT_FALSE(env.ok());
  env = DiscoverLaunchEnv(With(pod, {{"PET_NPROC_PER_NODE", "1"}}), Args());
  EXPECT_TRUE(env.ok()) << env.status();

  // RANK and WORLD_SIZE set by hand in a pod no operator made: torchrun's
  // meaning, as anywhere (two ranks of a development pod pick two GPUs).
  EnvMap by_hand = pod;
  by_hand.erase("VC_TASK_INDEX");
  env = DiscoverLaunchEnv(by_hand, Args());
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->source, LaunchSource::kTorchrun);
  EXPECT_EQ(env->local_rank, 2);
  EXPECT_TRUE(env->local_inferred);
}

TEST(LaunchEnvTest, OperatorPodsAndLaunchedRanks) {
  EXPECT_FALSE(OperatorPod({{"PET_NNODES", "2"}}));  // not in a pod
  EXPECT_FALSE(OperatorPod({{"KUBERNETES_SERVICE_HOST", "x"}, {"RANK", "0"}}));
  EXPECT_TRUE(
      OperatorPod({{"KUBERNETES_SERVICE_HOST", "x"}, {"PET_NNODES", "2"}}));
  EXPECT_TRUE(
      OperatorPod({{"KUBERNETES_SERVICE_HOST", "x"}, {"VC_TASK_INDEX", "0"}}));
  EXPECT_FALSE(LaunchedAsRank({{"RANK", "0"}, {"WORLD_SIZE", "2"}}));
  for (const char* var : {"LOCAL_RANK", "LOCAL_WORLD_SIZE",
                          "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    EXPECT_TRUE(LaunchedAsRank({{var, "0"}})) << var;
  }
}

TEST(LaunchEnvTest, StoreTokenFromVariableOrFile) {
  EXPECT_EQ(*StoreToken({}), "");
  EXPECT_EQ(*StoreToken({{"DTRAIN_STORE_TOKEN", "s3cret"}}), "s3cret");
  const std::string file = absl::StrCat(::testing::TempDir(), "/store_token");
  {
    std::ofstream out(file);
    out << "from-file\n";
  }
  EXPECT_EQ(*StoreToken({{"DTRAIN_STORE_TOKEN_FILE", file}}), "from-file");
  EXPECT_THAT(std::string(StoreToken({{"DTRAIN_STORE_TOKEN", "a"},
                                      {"DTRAIN_STORE_TOKEN_FILE", file}})
                              .status()
                              .message()),
              HasSubstr("both set"));
  EXPECT_THAT(
      std::string(StoreToken({{"DTRAIN_STORE_TOKEN", ""}}).status().message()),
      HasSubstr("DTRAIN_STORE_TOKEN gives an empty token"));
  EXPECT_THAT(std::string(StoreToken({{"DTRAIN_STORE_TOKEN_FILE",
                                       "/nonexistent/token"}})
                              .status()
                              .message()),
              HasSubstr("DTRAIN_STORE_TOKEN_FILE: "));
}

TEST(LaunchEnvTest, SourceNames) {
  EXPECT_EQ(LaunchSourceName(LaunchSource::kExplicit), "explicit");
  EXPECT_EQ(LaunchSourceName(LaunchSource::kTorchrun), "torchrun");
  EXPECT_EQ(LaunchSourceName(LaunchSource::kKubernetes), "kubernetes");
  EXPECT_EQ(LaunchSourceName(LaunchSource::kOpenMpi), "openmpi");
  EXPECT_EQ(LaunchSourceName(LaunchSource::kMpich), "mpich");
  EXPECT_EQ(LaunchSourceName(LaunchSource::kSlurm), "slurm");
  EXPECT_EQ(LaunchSourceName(LaunchSource::kSingleProcess), "single process");
}

TEST(ProcessEnvTest, SnapshotsTheEnvironment) {
  ASSERT_EQ(setenv("DTRAIN_LAUNCH_ENV_TEST", "a=b", 1), 0);
  const EnvMap env = ProcessEnv();
  ASSERT_EQ(unsetenv("DTRAIN_LAUNCH_ENV_TEST"), 0);
  ASSERT_TRUE(env.contains("DTRAIN_LAUNCH_ENV_TEST"));
  // Only the first '=' separates name and value.
  EXPECT_EQ(env.at("DTRAIN_LAUNCH_ENV_TEST"), "a=b");
  // A snapshot: later changes do not show.
  EXPECT_FALSE(ProcessEnv().contains("DTRAIN_LAUNCH_ENV_TEST"));
}

TEST(MergeQueryArgsTest, FillsUnsetFieldsFromQuery) {
  InitMethod method;
  method.scheme = InitMethod::kEnv;
  method.rank = 1;
  method.world_size = 4;
  absl::StatusOr<ExplicitArgs> merged =
      MergeQueryArgs(Args().LocalRank(1).MasterPort(7), method);
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_EQ(merged->rank, 1);
  EXPECT_EQ(merged->world_size, 4);
  EXPECT_EQ(merged->local_rank, 1);
  EXPECT_EQ(merged->master_port, 7);

  absl::StatusOr<ExplicitArgs> conflict =
      MergeQueryArgs(Args().WorldSize(8), method);
  ASSERT_FALSE(conflict.ok());
  EXPECT_EQ(conflict.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(conflict.status().message()),
              HasSubstr("init method 'env://?rank=1&world_size=4' gives "
                        "world_size=4 but the world_size argument is 8"));

  // The same value twice is no conflict.
  merged = MergeQueryArgs(Args().Rank(1), method);
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_EQ(merged->rank, 1);
}

}  // namespace
}  // namespace dtrain::rendezvous

namespace dtrain::rendezvous {
namespace {

TEST(LaunchEnvNetworkTest, ReadsGlooSocketIfname) {
  absl::StatusOr<LaunchEnv> e =
      DiscoverLaunchEnv({{"GLOO_SOCKET_IFNAME", "eth1"}}, {});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->gloo_socket_ifname, "eth1");
  EXPECT_EQ(DiscoverLaunchEnv({}, {})->gloo_socket_ifname, "");
}

}  // namespace
}  // namespace dtrain::rendezvous
