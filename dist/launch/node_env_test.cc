#include "dist/launch/node_env.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::launch {
namespace {

using rendezvous::EnvMap;
using ::testing::HasSubstr;

const NodeDevices kTwoCores{/*gpus=*/0, /*cores=*/2};

// What the kubelet sets in every pod.
EnvMap Pod(EnvMap env) {
  env["KUBERNETES_SERVICE_HOST"] = "10.96.0.1";
  env["KUBERNETES_SERVICE_PORT"] = "443";
  return env;
}

// A Volcano job's pod: the job controller's task index besides the kubelet's.
EnvMap VolcanoPod(EnvMap env) {
  env["VC_TASK_INDEX"] = env.contains("RANK") ? env["RANK"] : "0";
  return Pod(env);
}

// Kubeflow's PyTorchJob, nprocPerNode "2", a Master and one Worker: the
// worker's pod (pkg/controller.v1/pytorch/envvar.go).
EnvMap PyTorchJobWorker() {
  return Pod({{"PYTHONUNBUFFERED", "1"},
              {"MASTER_ADDR", "pj-master-0"},
              {"PET_MASTER_ADDR", "pj-master-0"},
              {"MASTER_PORT", "23456"},
              {"PET_MASTER_PORT", "23456"},
              {"WORLD_SIZE", "4"},
              {"RANK", "1"},
              {"PET_NODE_RANK", "1"},
              {"PET_NPROC_PER_NODE", "2"},
              {"PET_NNODES", "2"}});
}

TEST(ApplyNodeEnvTest, PyTorchJobTakesThePetVariables) {
  LaunchOptions o;
  absl::StatusOr<std::string> used =
      ApplyNodeEnv(PyTorchJobWorker(), {}, kTwoCores, &o);
  ASSERT_TRUE(used.ok()) << used.status();
  EXPECT_EQ(o.nproc_per_node, 2);
  EXPECT_EQ(o.nnodes, 2);
  EXPECT_EQ(o.max_nnodes, 2);
  EXPECT_EQ(o.node_rank, 1);
  EXPECT_EQ(o.master_addr, "pj-master-0");
  EXPECT_EQ(o.master_port, 23456);
  EXPECT_THAT(*used, HasSubstr("PET_NNODES=2"));
  EXPECT_THAT(*used, HasSubstr("PET_NODE_RANK=1"));
  // WORLD_SIZE (pods x processes) and RANK (the pod's) are not the launcher's.
  EXPECT_THAT(*used, ::testing::Not(HasSubstr("WORLD_SIZE")));
}

TEST(ApplyNodeEnvTest, TrainerV2SetsOnlyPetVariables) {
  LaunchOptions o;
  absl::StatusOr<std::string> used =
      ApplyNodeEnv(Pod({{"PET_NNODES", "2"},
                        {"PET_NPROC_PER_NODE", "1"},
                        {"PET_NODE_RANK", "0"},
                        {"PET_MASTER_ADDR", "tj-node-0-0.tj"},
                        {"PET_MASTER_PORT", "29500"}}),
                   {}, kTwoCores, &o);
  ASSERT_TRUE(used.ok()) << used.status();
  EXPECT_EQ(o.nproc_per_node, 1);
  EXPECT_EQ(o.nnodes, 2);
  EXPECT_EQ(o.node_rank, 0);
  EXPECT_EQ(o.master_addr, "tj-node-0-0.tj");
  EXPECT_EQ(o.master_port, 29500);
}

TEST(ApplyNodeEnvTest, VolcanoPodsCountAsNodes) {
  LaunchOptions o;
  o.nproc_per_node = 2;  // --nproc_per_node=2
  GivenSettings given;
  given.nproc_per_node = true;
  absl::StatusOr<std::string> used =
      ApplyNodeEnv(VolcanoPod({{"MASTER_ADDR", "vj-master-0.vj"},
                               {"MASTER_PORT", "23456"},
                               {"WORLD_SIZE", "3"},
                               {"RANK", "2"}}),
                   given, kTwoCores, &o);
  ASSERT_TRUE(used.ok()) << used.status();
  EXPECT_EQ(o.nproc_per_node, 2);
  EXPECT_EQ(o.nnodes, 3);
  EXPECT_EQ(o.node_rank, 2);
  EXPECT_EQ(o.master_addr, "vj-master-0.vj");
  EXPECT_EQ(o.master_port, 23456);
  EXPECT_THAT(*used, HasSubstr("WORLD_SIZE=3 (pods)"));
  EXPECT_THAT(*used, HasSubstr("RANK=2 (this pod)"));
}

TEST(ApplyNodeEnvTest, TorchrunsVariablesWinOverThePods) {
  LaunchOptions o;
  absl::StatusOr<std::string> used =
      ApplyNodeEnv(VolcanoPod({{"PET_NODE_RANK", "1"},
                               {"RANK", "0"},
                               {"WORLD_SIZE", "2"},
                               {"PET_MASTER_PORT", "29500"},
                               {"MASTER_PORT", "23456"}}),
                   {}, kTwoCores, &o);
  ASSERT_TRUE(used.ok()) << used.status();
  EXPECT_EQ(o.node_rank, 1);
  EXPECT_EQ(o.nnodes, 2);  // no PET_NNODES: the pod's WORLD_SIZE
  EXPECT_EQ(o.master_port, 29500);
  EXPECT_THAT(*used, ::testing::Not(HasSubstr("RANK=0")));
}

TEST(ApplyNodeEnvTest, AnyPodsServiceVariablesAreNotTheMasters) {
  // A Service named "master" in the namespace: MASTER_PORT=tcp://...
  LaunchOptions o;
  absl::StatusOr<std::string> used =
      ApplyNodeEnv(Pod({{"MASTER_PORT", "tcp://10.0.0.1:23456"},
                        {"MASTER_SERVICE_HOST", "10.0.0.1"}}),
                   {}, kTwoCores, &o);
  ASSERT_TRUE(used.ok()) << used.status();
  EXPECT_EQ(*used, "");
  EXPECT_EQ(o.master_port, 29500);
  // Nor RANK and WORLD_SIZE set by hand in a pod no operator made.
  used = ApplyNodeEnv(Pod({{"RANK", "1"}, {"WORLD_SIZE", "2"}}), {}, kTwoCores,
                      &o);
  ASSERT_TRUE(used.ok()) << used.status();
  EXPECT_EQ(*used, "");
  EXPECT_EQ(o.nnodes, 1);
}

TEST(ApplyNodeEnvTest, OutsideAPodRankAndMasterAreNotTheLaunchers) {
  LaunchOptions o;
  absl::StatusOr<std::string> used = ApplyNodeEnv(
      {{"MASTER_ADDR", "10.0.0.1"}, {"WORLD_SIZE", "3"}, {"RANK", "2"}}, {},
      kTwoCores, &o);
  ASSERT_TRUE(used.ok()) << used.status();
  EXPECT_EQ(*used, "");
  EXPECT_EQ(o.nnodes, 1);
  EXPECT_EQ(o.master_addr, "127.0.0.1");
}

TEST(ApplyNodeEnvTest, TheCommandLineWins) {
  LaunchOptions o;
  o.nnodes = 1;
  o.master_port = 4000;
  GivenSettings given;
  given.nnodes = true;
  given.master_port = true;
  absl::StatusOr<std::string> used =
      ApplyNodeEnv(PyTorchJobWorker(), given, kTwoCores, &o);
  ASSERT_TRUE(used.ok()) << used.status();
  EXPECT_EQ(o.nnodes, 1);
  EXPECT_EQ(o.master_port, 4000);
  EXPECT_EQ(o.node_rank, 1);
  EXPECT_THAT(*used, ::testing::Not(HasSubstr("PET_NNODES")));
}

TEST(ApplyNodeEnvTest, AutoGpuAndCpuAsTorchrunCountsThem) {
  struct Case {
    std::string word;
    NodeDevices devices;
    int want;
  };
  for (const Case& c : {Case{"auto", {0, 6}, 6}, Case{"auto", {4, 6}, 4},
                        Case{"gpu", {2, 6}, 2}, Case{"cpu", {2, 6}, 6},
                        Case{"AUTO", {0, 3}, 3}}) {
    LaunchOptions o;
    absl::StatusOr<std::string> used =
        ApplyNodeEnv({{"PET_NPROC_PER_NODE", c.word}}, {}, c.devices, &o);
    ASSERT_TRUE(used.ok()) << c.word << ": " << used.status();
    EXPECT_EQ(o.nproc_per_node, c.want) << c.word;
  }
  LaunchOptions o;
  absl::StatusOr<std::string> used =
      ApplyNodeEnv({{"PET_NPROC_PER_NODE", "auto"}}, {}, {0, 6}, &o);
  EXPECT_THAT(*used, HasSubstr("PET_NPROC_PER_NODE=auto (6 cores, no GPU)"));
}

TEST(ApplyNodeEnvTest, ElasticRangeFromPetNnodes) {
  LaunchOptions o;
  o.elastic = true;
  absl::StatusOr<std::string> used = ApplyNodeEnv(
      {{"PET_NNODES", "1:3"}, {"PET_NODE_RANK", "2"}}, {}, kTwoCores, &o);
  ASSERT_TRUE(used.ok()) << used.status();
  EXPECT_EQ(o.nnodes, 1);
  EXPECT_EQ(o.max_nnodes, 3);
  EXPECT_EQ(o.node_rank, 2);
}

TEST(ApplyNodeEnvTest, BadValuesAreNamed) {
  struct Case {
    EnvMap env;
    std::string want;
  };
  for (const Case& c : {
           Case{{{"PET_NPROC_PER_NODE", "two"}},
                "PET_NPROC_PER_NODE='two' is neither a number"},
           Case{{{"PET_NPROC_PER_NODE", "0"}},
                "PET_NPROC_PER_NODE='0' is outside 1.."},
           Case{{{"PET_NPROC_PER_NODE", "gpu"}},
                "PET_NPROC_PER_NODE='gpu' asks for one rank per GPU"},
           Case{{{"PET_NNODES", "3:1"}}, "PET_NNODES='3:1'"},
           Case{{{"PET_NNODES", "1:3"}},
                "PET_NNODES='1:3' is a range of nodes, for an elastic job"},
           Case{{{"PET_NODE_RANK", "-1"}}, "PET_NODE_RANK='-1' is outside"},
           Case{{{"PET_MASTER_PORT", "70000"}},
                "PET_MASTER_PORT='70000' is outside 1..65535"},
           Case{{{"PET_MASTER_ADDR", ""}}, "PET_MASTER_ADDR='' is empty"},
           Case{{{"PET_RDZV_BACKEND", "c10d"}, {"PET_NNODES", "1:2"}},
                "PET_RDZV_BACKEND='c10d' (a PyTorchJob's elasticPolicy)"},
           Case{VolcanoPod({{"RANK", "1"}}),
                "this pod sets RANK but not WORLD_SIZE"},
           Case{VolcanoPod({{"WORLD_SIZE", "x"}, {"RANK", "0"}}),
                "WORLD_SIZE='x' is not an integer"},
       }) {
    LaunchOptions o;
    absl::StatusOr<std::string> used = ApplyNodeEnv(c.env, {}, {0, 2}, &o);
    ASSERT_FALSE(used.ok()) << c.want;
    EXPECT_EQ(used.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(used.status().message(), HasSubstr(c.want));
  }
}

TEST(ApplyNodeEnvTest, StaticRendezvousIsTheMastersAddress) {
  for (const char* backend : {"static", ""}) {
    LaunchOptions o;
    absl::StatusOr<std::string> used =
        ApplyNodeEnv({{"PET_RDZV_BACKEND", backend}, {"PET_NNODES", "2"}}, {},
                     kTwoCores, &o);
    ASSERT_TRUE(used.ok()) << backend << ": " << used.status();
    EXPECT_EQ(o.nnodes, 2);
  }
  // With this node's rank given, a dynamic backend's name does no harm.
  LaunchOptions o;
  GivenSettings given;
  given.node_rank = true;
  EXPECT_TRUE(
      ApplyNodeEnv({{"PET_RDZV_BACKEND", "c10d"}}, given, kTwoCores, &o).ok());
}

TEST(HasNodeSettingsTest, AnyPetSettingCounts) {
  EXPECT_FALSE(HasNodeSettings({}));
  EXPECT_FALSE(HasNodeSettings(Pod({{"RANK", "0"}, {"WORLD_SIZE", "2"}})));
  EXPECT_TRUE(HasNodeSettings({{"PET_NNODES", "2"}}));
  EXPECT_TRUE(HasNodeSettings({{"PET_NPROC_PER_NODE", "auto"}}));
}

TEST(VisibleNvidiaGpusTest, CudaVisibleDevicesThenDeviceFiles) {
  EXPECT_EQ(VisibleNvidiaGpus({{"CUDA_VISIBLE_DEVICES", "0,1,3"}}), 3);
  EXPECT_EQ(VisibleNvidiaGpus({{"CUDA_VISIBLE_DEVICES", ""}}), 0);
  EXPECT_EQ(VisibleNvidiaGpus({{"CUDA_VISIBLE_DEVICES", "-1"}}), 0);

  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dev = std::string(tmp != nullptr ? tmp : "/tmp") + "/dev";
  ::mkdir(dev.c_str(), 0755);
  for (const char* name : {"nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"}) {
    const int fd = ::open((dev + "/" + name).c_str(), O_CREAT | O_WRONLY, 0644);
    ASSERT_GE(fd, 0);
    ::close(fd);
  }
  EXPECT_EQ(VisibleNvidiaGpus({}, dev), 2);
  EXPECT_EQ(VisibleNvidiaGpus({}, dev + "/missing"), 0);
}

}  // namespace
}  // namespace dtrain::launch
