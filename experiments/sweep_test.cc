#include "experiments/sweep.h"

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/machine_limits.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::experiments {
namespace {

using ::testing::HasSubstr;

TEST(SweepTest, DefaultIsTheBooksExperimentPlusResNetAndBounds) {
  absl::StatusOr<SweepPlan> plan = PlanSweep(SweepOptions());
  ASSERT_TRUE(plan.ok()) << plan.status();
  // Per backend (Gloo over TCP, then with shared memory) and model: 1, 2, 4
  // processes synchronised, 2 and 4 without sync.
  ASSERT_EQ(plan->runs.size(), 20u);
  EXPECT_EQ(plan->runs[10].Name(), "dtrain gloo+shm convnet np=1 bs=128");
  const RunConfig& first = plan->runs[0];
  EXPECT_EQ(first.Name(), "dtrain gloo convnet np=1 bs=128");
  EXPECT_EQ(first.max_steps, 0);  // a whole epoch
  EXPECT_EQ(plan->runs[1].Name(), "dtrain gloo convnet np=2 bs=64");
  EXPECT_EQ(plan->runs[2].Name(), "dtrain gloo convnet np=2 bs=64 no-sync");
  EXPECT_EQ(plan->runs[3].Name(), "dtrain gloo convnet np=4 bs=32");
  EXPECT_EQ(plan->runs[5].model, "resnet18");
  EXPECT_EQ(plan->runs[5].max_steps, 8);
  EXPECT_TRUE(plan->skipped.empty());
}

// The simulated cluster (experiments/sim_cluster.sh) passes only
// --world_sizes, one per --ranks_per_host entry times --hosts (2..250): the
// default batch sizes must fit any such list, as a global batch of 128.
TEST(SweepTest, DefaultBatchSizesFitEveryWorldSizeListOfTheSimCluster) {
  const std::vector<std::vector<int>> ranks_per_host_lists = {
      {1}, {2}, {3}, {1, 2}, {1, 2, 4}, {1, 2, 3, 4}};
  for (int hosts = 2; hosts <= 250; ++hosts) {
    for (const std::vector<int>& per_host : ranks_per_host_lists) {
      SweepOptions o;  // the defaults, as a documented command leaves them
      o.world_sizes.clear();
      for (int r : per_host) o.world_sizes.push_back(r * hosts);
      o.nnodes = hosts;
      o.master_addr = "10.200.0.1";
      o.reference_pytorch = true;
      absl::StatusOr<SweepPlan> plan = PlanSweep(o);
      ASSERT_TRUE(plan.ok()) << hosts << " hosts: " << plan.status();
      ASSERT_FALSE(plan->runs.empty()) << hosts << " hosts";
      for (const RunConfig& c : plan->runs) {
        EXPECT_EQ(c.batch_size, DefaultBatchSize(c.world_size)) << c.Name();
        EXPECT_GE(c.batch_size, 1) << c.Name();
        if (c.world_size <= kDefaultGlobalBatch) {
          // The global batch is 128, or the largest multiple below it.
          EXPECT_LE(c.batch_size * c.world_size, kDefaultGlobalBatch);
          EXPECT_GT(c.batch_size * c.world_size,
                    kDefaultGlobalBatch - c.world_size);
        }
      }
    }
  }
}

TEST(SweepTest, DefaultBatchSizesFollowTheWorldSizes) {
  SweepOptions o;
  o.backends = {"gloo"};
  o.models = {"convnet"};
  o.bound = false;
  o.world_sizes = {2};  // the simulated cluster's 2 hosts x 1 rank
  absl::StatusOr<SweepPlan> plan = PlanSweep(o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->runs.size(), 1u);
  EXPECT_EQ(plan->runs[0].Name(), "dtrain gloo convnet np=2 bs=64");

  o.world_sizes = {3, 6, 8};
  plan = PlanSweep(o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->runs.size(), 3u);
  EXPECT_EQ(plan->runs[0].batch_size, 42);  // rounded down: global 126
  EXPECT_EQ(plan->runs[1].batch_size, 21);
  EXPECT_EQ(plan->runs[2].batch_size, 16);
  EXPECT_EQ(DefaultBatchSize(1), 128);
  EXPECT_EQ(DefaultBatchSize(4), 32);
  EXPECT_EQ(DefaultBatchSize(500), 1);

  // Given sizes still win, one for all or one per world size.
  o.batch_sizes = {32};
  plan = PlanSweep(o);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->runs[2].batch_size, 32);
  o.batch_sizes = {10, 20};
  plan = PlanSweep(o);
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(plan.status().message(),
              HasSubstr("one per world size (3), or none (128 / world size "
                        "each), not 2"));
}

TEST(SweepTest, NcclWithoutDevicesIsSkippedWithTheReason) {
  SweepOptions o;
  o.backends = {"gloo", "nccl"};
  o.models = {"convnet"};
  absl::StatusOr<SweepPlan> plan = PlanSweep(o);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->runs.size(), 5u);
  ASSERT_EQ(plan->skipped.size(), 1u);
  EXPECT_EQ(plan->skipped[0].what, "nccl");
  EXPECT_THAT(plan->skipped[0].why, HasSubstr("CUDA"));

  o.cuda_devices = 2;  // np=4 needs more devices than there are
  plan = PlanSweep(o);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->runs.size(), 5u + 3u);
  ASSERT_EQ(plan->skipped.size(), 1u);
  EXPECT_EQ(plan->skipped[0].what, "nccl np=4");
}

TEST(SweepTest, GlobalBatchRepeatsAndReference) {
  SweepOptions o;
  o.backends = {"gloo"};
  o.models = {"convnet"};
  o.global_batch = 256;
  o.repeats = 2;
  o.bound = false;
  o.reference_pytorch = true;
  absl::StatusOr<SweepPlan> plan = PlanSweep(o);
  ASSERT_TRUE(plan.ok());
  // 3 world sizes x 2 implementations x 2 repeats; per world size, repeat 0
  // of both implementations before repeat 1.
  ASSERT_EQ(plan->runs.size(), 12u);
  EXPECT_EQ(plan->runs[0].batch_size, 256);
  EXPECT_EQ(plan->runs[0].Slug(), "dtrain_gloo_convnet_np1_bs256_sync_r0");
  EXPECT_EQ(plan->runs[1].Slug(), "pytorch_gloo_convnet_np1_bs256_sync_r0");
  EXPECT_EQ(plan->runs[2].Slug(), "dtrain_gloo_convnet_np1_bs256_sync_r1");
  EXPECT_EQ(plan->runs[3].Slug(), "pytorch_gloo_convnet_np1_bs256_sync_r1");
  EXPECT_EQ(plan->runs[11].batch_size, 64);
  EXPECT_EQ(plan->runs[11].Slug(), "pytorch_gloo_convnet_np4_bs64_sync_r1");
}

TEST(SweepTest, RepeatsInterleaveBothSidesOfEveryRatio) {
  SweepOptions o;
  o.backends = {"gloo"};
  o.models = {"convnet"};
  o.world_sizes = {2};
  o.batch_sizes = {32};
  o.repeats = 2;
  o.reference_pytorch = true;
  o.master_port = 40000;
  absl::StatusOr<SweepPlan> plan = PlanSweep(o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::vector<std::string> slugs;
  std::set<int> ports;
  for (const RunConfig& c : plan->runs) {
    slugs.push_back(c.Slug());
    ports.insert(c.master_port);
  }
  EXPECT_THAT(
      slugs, ::testing::ElementsAre("dtrain_gloo_convnet_np2_bs32_sync_r0",
                                    "dtrain_gloo_convnet_np2_bs32_nosync_r0",
                                    "pytorch_gloo_convnet_np2_bs32_sync_r0",
                                    "pytorch_gloo_convnet_np2_bs32_nosync_r0",
                                    "dtrain_gloo_convnet_np2_bs32_sync_r1",
                                    "dtrain_gloo_convnet_np2_bs32_nosync_r1",
                                    "pytorch_gloo_convnet_np2_bs32_sync_r1",
                                    "pytorch_gloo_convnet_np2_bs32_nosync_r1"));
  EXPECT_EQ(ports.size(), slugs.size());  // each run its own port
}

TEST(SweepTest, NoMultiNodeFlagsKeepOneNodeAndFreePorts) {
  absl::StatusOr<SweepPlan> plan = PlanSweep(SweepOptions());
  ASSERT_TRUE(plan.ok());
  for (const RunConfig& c : plan->runs) {
    EXPECT_EQ(c.nnodes, 1);
    EXPECT_EQ(c.ProcessesPerNode(), c.world_size);
    EXPECT_EQ(c.master_port, 0) << c.Name();  // picked free at run time
    EXPECT_TRUE(c.master_addr.empty());
  }
}

TEST(SweepTest, PyTorchHasNoSharedMemoryRunsAndSaysSo) {
  SweepOptions o;
  o.models = {"convnet"};
  o.bound = false;
  o.reference_pytorch = true;
  absl::StatusOr<SweepPlan> plan = PlanSweep(o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  // dtrain: both backends; PyTorch: gloo only.
  ASSERT_EQ(plan->runs.size(), 3u * 3u);
  ASSERT_EQ(plan->skipped.size(), 1u);
  EXPECT_EQ(plan->skipped[0].what, "pytorch gloo+shm");
  EXPECT_THAT(plan->skipped[0].why, HasSubstr("no shared-memory"));
}

TEST(SweepTest, OverTwoNodesWorldSizesSpreadEvenlyWithOwnPorts) {
  SweepOptions o;
  o.backends = {"gloo"};
  o.models = {"convnet"};
  o.world_sizes = {1, 2, 4};
  o.nnodes = 2;
  o.node_rank = 1;
  o.master_addr = "10.0.0.1";
  o.master_port = 30000;
  absl::StatusOr<SweepPlan> plan = PlanSweep(o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  // np=1 cannot spread over 2 nodes; np=2 and np=4 with and without sync.
  ASSERT_EQ(plan->runs.size(), 4u);
  ASSERT_EQ(plan->skipped.size(), 1u);
  EXPECT_EQ(plan->skipped[0].what, "np=1");
  EXPECT_THAT(plan->skipped[0].why, HasSubstr("evenly over 2 nodes"));
  EXPECT_EQ(plan->runs[0].Name(), "dtrain gloo convnet np=2 bs=64");
  EXPECT_EQ(plan->runs[0].ProcessesPerNode(), 1);
  EXPECT_EQ(plan->runs[2].world_size, 4);
  EXPECT_EQ(plan->runs[2].ProcessesPerNode(), 2);
  for (const RunConfig& c : plan->runs) {
    EXPECT_EQ(c.nnodes, 2);
    EXPECT_EQ(c.master_addr, "10.0.0.1");
  }
  // Slot 0 was the skipped np=1 run: ports count it, so every node agrees.
  EXPECT_EQ(plan->runs[0].master_port, 30001);
  EXPECT_EQ(plan->runs[1].master_port, 30002);
  EXPECT_EQ(plan->runs[2].master_port, 30003);
  EXPECT_EQ(plan->runs[3].master_port, 30004);

  // Without --master_port, torchrun's default is the first port.
  o.master_port = 0;
  plan = PlanSweep(o);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->runs[0].master_port, kDefaultMasterPort + 1);

  // One node with an explicit port: deterministic ports there too.
  o.nnodes = 1;
  o.node_rank = 0;
  o.master_port = 30000;
  plan = PlanSweep(o);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->runs[0].master_port, 30000);
  EXPECT_EQ(plan->runs[0].world_size, 1);
}

TEST(SweepTest, NcclNeedsOneDevicePerProcessOfANode) {
  SweepOptions o;
  o.backends = {"gloo", "nccl"};
  o.models = {"convnet", "resnet18"};
  o.world_sizes = {2, 4, 8};
  o.batch_sizes = {64};
  o.nnodes = 2;
  o.master_addr = "node0";
  o.cuda_devices = 2;  // 2 x 2 GPUs: np=8 would need 4 per node
  absl::StatusOr<SweepPlan> plan = PlanSweep(o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->skipped.size(), 1u);  // once, not once per model
  EXPECT_EQ(plan->skipped[0].what, "nccl np=8");
  EXPECT_EQ(plan->skipped[0].why,
            "needs 4 CUDA devices per node (8 processes over 2 nodes), 2 "
            "visible");
  int nccl = 0;
  for (const RunConfig& c : plan->runs) {
    if (c.backend != "nccl") continue;
    ++nccl;
    EXPECT_LE(c.ProcessesPerNode(), 2) << c.Name();
  }
  EXPECT_EQ(nccl, 2 * 2 * 2);  // models x {np=2, np=4} x {sync, no-sync}

  // A node that sees fewer devices skips more runs, but the runs it makes
  // keep the ports every other node gives them.
  absl::StatusOr<SweepPlan> fewer = [&] {
    SweepOptions f = o;
    f.cuda_devices = 1;
    return PlanSweep(f);
  }();
  ASSERT_TRUE(fewer.ok());
  for (const RunConfig& c : fewer->runs) {
    bool found = false;
    for (const RunConfig& d : plan->runs) {
      if (d.Slug() == c.Slug()) {
        found = true;
        EXPECT_EQ(d.master_port, c.master_port) << c.Name();
      }
    }
    EXPECT_TRUE(found) << c.Name();
  }
}

TEST(SweepTest, PyTorchNcclRunsNeedAPythonTorchWithCudaAndNccl) {
  SweepOptions o;
  o.backends = {"gloo", "nccl"};
  o.models = {"convnet"};
  o.world_sizes = {1, 2};
  o.batch_sizes = {64};
  o.bound = false;
  o.reference_pytorch = true;
  o.cuda_devices = 2;  // ours can run NCCL
  auto pytorch_nccl_runs = [](const SweepPlan& plan) {
    int n = 0;
    for (const RunConfig& c : plan.runs)
      n += c.implementation == "pytorch" && c.backend == "nccl";
    return n;
  };
  auto gloo_runs = [](const SweepPlan& plan) {
    int n = 0;
    for (const RunConfig& c : plan.runs) n += c.backend == "gloo";
    return n;
  };
  struct Case {
    PythonTorch torch;
    std::string what;
    std::string why;
  };
  const Case cases[] = {
      {{"1.13.1", false, 0, false},
       "pytorch nccl",
       "Python torch 1.13.1 has no CUDA"},
      {{"2.6.0", true, 2, false},
       "pytorch nccl",
       "Python torch 2.6.0 has no NCCL"},
      {{"2.6.0", true, 0, true},
       "pytorch nccl",
       "Python torch 2.6.0 sees 0 CUDA devices"},
      {{"2.6.0", true, 1, true},
       "pytorch nccl np=2",
       "needs 2 CUDA devices, Python torch 2.6.0 sees 1"},
  };
  for (const Case& c : cases) {
    o.python_torch = c.torch;
    absl::StatusOr<SweepPlan> plan = PlanSweep(o);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_EQ(plan->skipped.size(), 1u) << c.why;
    EXPECT_EQ(plan->skipped[0].what, c.what);
    EXPECT_EQ(plan->skipped[0].why, c.why);
    // Ours still runs NCCL; PyTorch's gloo runs are unaffected.
    EXPECT_EQ(gloo_runs(*plan), 4) << c.why;
    EXPECT_EQ(pytorch_nccl_runs(*plan), c.what == "pytorch nccl" ? 0 : 1);
  }
  o.python_torch = {"2.6.0", true, 2, true};
  absl::StatusOr<SweepPlan> plan = PlanSweep(o);
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(plan->skipped.empty());
  EXPECT_EQ(pytorch_nccl_runs(*plan), 2);

  // Each implementation needs its own torch's devices: a CPU-only LibTorch
  // skips ours, PyTorch's still run.
  o.cuda_devices = 0;
  plan = PlanSweep(o);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->skipped.size(), 1u);
  EXPECT_EQ(plan->skipped[0].what, "nccl");
  EXPECT_EQ(pytorch_nccl_runs(*plan), 2);
  // Both CPU-only (this machine): both reasons are shown.
  o.python_torch = {"1.13.1", false, 0, false};
  plan = PlanSweep(o);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->skipped.size(), 2u);
  EXPECT_EQ(plan->skipped[1].what, "pytorch nccl");
  EXPECT_EQ(plan->skipped[1].why, "Python torch 1.13.1 has no CUDA");
}

// Each hook runs beside the others of its configuration; the no-sync runs,
// which average nothing, are one bound for all of them (with the default
// hook: train refuses a hook without sync).
TEST(SweepTest, HooksRunSideBySideOverOneBound) {
  SweepOptions o;
  o.backends = {"gloo"};
  o.models = {"convnet"};
  o.world_sizes = {1, 2};
  o.comm_hooks = {"allreduce", "fp16", "local_sgd"};
  o.reference_pytorch = true;
  o.repeats = 2;
  o.master_port = 30000;
  absl::StatusOr<SweepPlan> plan = PlanSweep(o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::vector<std::string> names;
  std::set<int> ports;
  for (const RunConfig& c : plan->runs) {
    if (c.world_size == 2) names.push_back(c.Name());
    ports.insert(c.master_port);
  }
  EXPECT_THAT(names, ::testing::ElementsAre(
                         "dtrain gloo convnet np=2 bs=64",
                         "dtrain gloo convnet fp16 np=2 bs=64",
                         "dtrain gloo convnet local_sgd np=2 bs=64",
                         "dtrain gloo convnet np=2 bs=64 no-sync",
                         "pytorch gloo convnet np=2 bs=64",
                         "pytorch gloo convnet fp16 np=2 bs=64",
                         "pytorch gloo convnet local_sgd np=2 bs=64",
                         "pytorch gloo convnet np=2 bs=64 no-sync",
                         "dtrain gloo convnet np=2 bs=64 #2",
                         "dtrain gloo convnet fp16 np=2 bs=64 #2",
                         "dtrain gloo convnet local_sgd np=2 bs=64 #2",
                         "dtrain gloo convnet np=2 bs=64 no-sync #2",
                         "pytorch gloo convnet np=2 bs=64 #2",
                         "pytorch gloo convnet fp16 np=2 bs=64 #2",
                         "pytorch gloo convnet local_sgd np=2 bs=64 #2",
                         "pytorch gloo convnet np=2 bs=64 no-sync #2"));
  // np=1: 3 hooks x 2 implementations x 2 repeats, no bound.
  EXPECT_EQ(plan->runs.size(), 12u + names.size());
  EXPECT_EQ(ports.size(), plan->runs.size());  // each run its own port
  for (const RunConfig& c : plan->runs) {
    if (!c.sync_gradients) {
      EXPECT_EQ(c.comm_hook, kDefaultCommHook);
    }
  }
  EXPECT_EQ(plan->runs[1].Slug(), "dtrain_gloo_convnet_fp16_np1_bs128_sync_r0");
  EXPECT_EQ(plan->runs[2].Slug(),
            "dtrain_gloo_convnet_local_sgd_np1_bs128_sync_r0");

  // The default: one hook, the plan of a sweep before hooks existed.
  o.comm_hooks = {kDefaultCommHook};
  plan = PlanSweep(o);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->runs.size(), 4u + 8u);
  EXPECT_EQ(plan->runs[0].Slug(), "dtrain_gloo_convnet_np1_bs128_sync_r0");
}

// ZeRO's stages run beside plain DDP for each hook they combine with, over
// the one bound; the combinations train refuses, and PyTorch's stage 2, are
// skipped with the reason, their ports kept.
TEST(SweepTest, ZeroStagesRunBesideDdpOverOneBound) {
  SweepOptions o;
  o.backends = {"gloo"};
  o.models = {"resnet18"};
  o.world_sizes = {2};
  o.comm_hooks = {"allreduce", "fp16", "local_sgd"};
  o.zero_stages = {0, 1, 2};
  o.reference_pytorch = true;
  o.master_port = 30000;
  absl::StatusOr<SweepPlan> plan = PlanSweep(o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::vector<std::string> names;
  for (const RunConfig& c : plan->runs) names.push_back(c.Name());
  EXPECT_THAT(names, ::testing::ElementsAre(
                         "dtrain gloo resnet18 np=2 bs=64",
                         "dtrain gloo resnet18 zero1 np=2 bs=64",
                         "dtrain gloo resnet18 zero2 np=2 bs=64",
                         "dtrain gloo resnet18 fp16 np=2 bs=64",
                         "dtrain gloo resnet18 fp16 zero1 np=2 bs=64",
                         "dtrain gloo resnet18 local_sgd np=2 bs=64",
                         "dtrain gloo resnet18 np=2 bs=64 no-sync",
                         "pytorch gloo resnet18 np=2 bs=64",
                         "pytorch gloo resnet18 zero1 np=2 bs=64",
                         "pytorch gloo resnet18 fp16 np=2 bs=64",
                         "pytorch gloo resnet18 fp16 zero1 np=2 bs=64",
                         "pytorch gloo resnet18 local_sgd np=2 bs=64",
                         "pytorch gloo resnet18 np=2 bs=64 no-sync"));
  EXPECT_EQ(plan->runs[1].zero, 1);
  EXPECT_EQ(plan->runs[1].Slug(),
            "dtrain_gloo_resnet18_zero1_np2_bs64_sync_r0");
  EXPECT_EQ(plan->runs[4].Slug(),
            "dtrain_gloo_resnet18_fp16_zero1_np2_bs64_sync_r0");
  EXPECT_EQ(plan->runs[6].zero, 0);  // the bound
  // 10 kinds per implementation: ports of the skipped ones kept.
  EXPECT_EQ(plan->runs[7].master_port, 30000 + 10);
  std::vector<std::string> skipped;
  for (const Skipped& k : plan->skipped)
    skipped.push_back(absl::StrCat(k.what, ": ", k.why));
  EXPECT_THAT(
      skipped,
      ::testing::UnorderedElementsAre(
          "zero2 fp16: stage 2 averages gradients with its own reduce-scatter "
          "hook",
          HasSubstr("zero1 local_sgd: post-local SGD averages parameters"),
          HasSubstr("zero2 local_sgd: post-local SGD"),
          "pytorch zero2: PyTorch's ZeroRedundancyOptimizer is stage 1 (its "
          "stage 2 is FSDP)",
          "pytorch zero2 fp16: stage 2 averages gradients with its own "
          "reduce-scatter hook",
          HasSubstr("pytorch zero1 local_sgd"),
          HasSubstr("pytorch zero2 local_sgd")));
}

TEST(SweepTest, InstrumentationsRunInterleavedWithTheDefaultsOwn) {
  SweepOptions o;
  o.backends = {"gloo"};
  o.models = {"convnet"};
  o.world_sizes = {2};
  o.instrumentation = {"default", "trace", "no_flight_recorder"};
  o.repeats = 2;
  o.reference_pytorch = true;
  absl::StatusOr<SweepPlan> plan = PlanSweep(o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::vector<std::string> names;
  for (const RunConfig& c : plan->runs) names.push_back(c.Name());
  // PyTorch's runs and the bound are the default's only.
  EXPECT_THAT(names, ::testing::ElementsAre(
                         "dtrain gloo convnet np=2 bs=64",
                         "dtrain gloo convnet np=2 bs=64 trace",
                         "dtrain gloo convnet np=2 bs=64 no_flight_recorder",
                         "dtrain gloo convnet np=2 bs=64 no-sync",
                         "pytorch gloo convnet np=2 bs=64",
                         "pytorch gloo convnet np=2 bs=64 no-sync",
                         // Rotated: no instrumentation always runs first.
                         "dtrain gloo convnet np=2 bs=64 trace #2",
                         "dtrain gloo convnet np=2 bs=64 no_flight_recorder #2",
                         "dtrain gloo convnet np=2 bs=64 #2",
                         "dtrain gloo convnet np=2 bs=64 no-sync #2",
                         "pytorch gloo convnet np=2 bs=64 #2",
                         "pytorch gloo convnet np=2 bs=64 no-sync #2"));
  EXPECT_EQ(plan->runs[1].Slug(), "dtrain_gloo_convnet_np2_bs64_trace_sync_r0");
  EXPECT_EQ(plan->runs[2].instrumentation, "no_flight_recorder");

  for (const auto& bad : std::vector<std::vector<std::string>>{
           {"trace"}, {"default", "tracing"}, {"default", "default"}}) {
    o.instrumentation = bad;
    EXPECT_EQ(PlanSweep(o).status().code(), absl::StatusCode::kInvalidArgument)
        << bad.back();
  }
  o.instrumentation = {"trace"};
  EXPECT_THAT(std::string(PlanSweep(o).status().message()),
              HasSubstr("--instrumentation: must include default"));
  o.instrumentation = {"default", "tracing"};
  EXPECT_THAT(std::string(PlanSweep(o).status().message()),
              HasSubstr("unknown 'tracing'; known: default, trace, "
                        "no_flight_recorder"));
  o.instrumentation = {"default", "trace"};
  o.trace = true;
  EXPECT_THAT(std::string(PlanSweep(o).status().message()),
              HasSubstr("--trace: does not combine with --instrumentation"));
}

// Ports count every configuration the flags name, skipped ones too: a node
// that skips PyTorch's bf16 runs (its torch's Gloo cannot sum bfloat16)
// gives every other run the port every node gives it.
TEST(SweepTest, PyTorchBf16OnAGlooWithoutBfloat16IsSkipped) {
  SweepOptions o;
  o.backends = {"gloo"};
  o.models = {"convnet"};
  o.world_sizes = {2};
  o.comm_hooks = {"allreduce", "bf16", "fp16"};
  o.reference_pytorch = true;
  o.master_port = 30000;
  o.python_torch = {"2.6.0", false, 0, false, true};
  absl::StatusOr<SweepPlan> can = PlanSweep(o);
  ASSERT_TRUE(can.ok()) << can.status();
  EXPECT_TRUE(can->skipped.empty());
  EXPECT_EQ(can->runs.size(), 8u);

  o.python_torch = {"1.13.1", false, 0, false, false};
  absl::StatusOr<SweepPlan> cannot = PlanSweep(o);
  ASSERT_TRUE(cannot.ok()) << cannot.status();
  ASSERT_EQ(cannot->skipped.size(), 1u);
  EXPECT_EQ(cannot->skipped[0].what, "pytorch bf16");
  EXPECT_EQ(cannot->skipped[0].why,
            "Python torch 1.13.1's Gloo cannot allreduce bfloat16");
  ASSERT_EQ(cannot->runs.size(), 7u);  // ours' bf16 still runs
  for (const RunConfig& c : cannot->runs) {
    EXPECT_FALSE(c.implementation == "pytorch" && c.comm_hook == "bf16");
    for (const RunConfig& d : can->runs) {
      if (d.Slug() == c.Slug()) {
        EXPECT_EQ(d.master_port, c.master_port);
      }
    }
  }
}

// Debian's PyTorch 2.14 sums neither float16 nor bfloat16 over Gloo: both of
// its compression runs are skipped, each with its own reason, and ours run.
TEST(SweepTest, PyTorchFp16OnAGlooWithoutFloat16IsSkipped) {
  SweepOptions o;
  o.backends = {"gloo"};
  o.models = {"convnet"};
  o.world_sizes = {2};
  o.comm_hooks = {"allreduce", "fp16", "bf16"};
  o.reference_pytorch = true;
  o.python_torch = {"2.14.1", false, 0, false, false, false};
  absl::StatusOr<SweepPlan> plan = PlanSweep(o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->skipped.size(), 2u);
  EXPECT_EQ(plan->skipped[0].what, "pytorch fp16");
  EXPECT_EQ(plan->skipped[0].why,
            "Python torch 2.14.1's Gloo cannot allreduce float16");
  EXPECT_EQ(plan->skipped[1].what, "pytorch bf16");
  ASSERT_EQ(plan->runs.size(), 6u);  // ours: 3 hooks and no-sync; PyTorch: 2
  int ours_compressed = 0;
  for (const RunConfig& c : plan->runs) {
    if (c.implementation == "pytorch") {
      EXPECT_TRUE(c.comm_hook == "allreduce") << c.Slug();
    } else if (c.comm_hook == "fp16" || c.comm_hook == "bf16") {
      ++ours_compressed;
    }
  }
  EXPECT_EQ(ours_compressed, 2);
}

// The knobs and --train_flags reach every run, ours and PyTorch's, the bound
// runs too (they train with the same DDP).
TEST(SweepTest, KnobsAndTrainFlagsGoToEveryRun) {
  SweepOptions o;
  o.backends = {"gloo"};
  o.models = {"convnet"};
  o.world_sizes = {1, 2};
  o.comm_hooks = {"allreduce", "powersgd"};
  o.reference_pytorch = true;
  o.knobs.powersgd_rank = 2;
  o.knobs.powersgd_start_step = 10;
  o.knobs.powersgd_min_compression_rate = 1.5;
  o.knobs.powersgd_warm_start = false;
  o.knobs.static_graph = true;
  o.train_flags = {"--bucket_cap_mb=5"};
  absl::StatusOr<SweepPlan> plan = PlanSweep(o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const std::vector<std::string> want = {"--powersgd_rank=2",
                                         "--powersgd_start_step=10",
                                         "--powersgd_min_compression_rate=1.5",
                                         "--powersgd_warm_start=false",
                                         "--static_graph=true",
                                         "--bucket_cap_mb=5"};
  ASSERT_EQ(plan->runs.size(), 10u);
  for (const RunConfig& c : plan->runs) EXPECT_EQ(c.train_flags, want);
  EXPECT_THAT(KnobFlags(DdpKnobs()), ::testing::IsEmpty());
  // PowerSGD from step 1 is fine without error feedback and warm start, or
  // without powersgd among the hooks.
  o.knobs.powersgd_start_step = 1;
  o.knobs.powersgd_error_feedback = false;
  EXPECT_TRUE(PlanSweep(o).ok()) << PlanSweep(o).status();
  o.knobs.powersgd_error_feedback = true;
  o.comm_hooks = {"allreduce"};
  EXPECT_TRUE(PlanSweep(o).ok()) << PlanSweep(o).status();
  DdpKnobs all;
  all.powersgd_error_feedback = true;
  all.powersgd_seed = 7;
  all.local_sgd_start_step = 0;
  all.local_sgd_period = 8;
  all.gradient_as_bucket_view = false;
  all.powersgd_min_compression_rate = 0.1 + 2;
  EXPECT_THAT(KnobFlags(all),
              ::testing::ElementsAre(
                  "--powersgd_min_compression_rate=2.1",
                  "--powersgd_error_feedback=true", "--powersgd_seed=7",
                  "--local_sgd_start_step=0", "--local_sgd_period=8",
                  "--gradient_as_bucket_view=false"));
}

// Mutations that set a list: functions, since clang-format 14 and 19 lay out
// a lambda holding a braced list of several elements differently.
std::function<void(SweepOptions&)> SetHooks(std::vector<std::string> hooks) {
  return [hooks](SweepOptions& o) { o.comm_hooks = hooks; };
}
std::function<void(SweepOptions&)> SetTrainFlags(
    std::vector<std::string> flags) {
  return [flags](SweepOptions& o) { o.train_flags = flags; };
}
std::function<void(SweepOptions&)> SetZeroStages(std::vector<int> stages) {
  return [stages](SweepOptions& o) { o.zero_stages = stages; };
}

TEST(SweepTest, BadHooksKnobsAndTrainFlagsNameTheFlag) {
  struct Case {
    std::function<void(SweepOptions&)> mutate;
    std::string message;
  };
  const Case cases[] = {
      {[](SweepOptions& o) { o.comm_hooks = {}; }, "--comm_hooks: empty"},
      {SetHooks({"allreduce", "topk"}),
       "--comm_hooks: unknown hook 'topk'; known: allreduce, fp16, bf16, "
       "powersgd, local_sgd"},
      {SetHooks({"fp16", "fp16"}), "--comm_hooks: 'fp16' given twice"},
      {SetZeroStages({0, 3}), "--zero_stages: 3 is not 0 (none), 1 or 2"},
      {SetZeroStages({0, 1, 1}), "--zero_stages: 1 given twice"},
      {SetZeroStages({1}), "--zero_stages: must include 0"},
      {[](SweepOptions& o) { o.train_flags = {"--zero=1"}; },
       "--train_flags: --zero is set by the sweep for every run; use "
       "--zero_stages"},
      {[](SweepOptions& o) { o.knobs.powersgd_rank = 0; },
       "--powersgd_rank: 0 is not >= 1"},
      {[](SweepOptions& o) { o.knobs.powersgd_start_step = -1; },
       "--powersgd_start_step: -1 is not >= 0"},
      {[](SweepOptions& o) { o.knobs.local_sgd_period = 0; },
       "--local_sgd_period: 0 is not >= 1"},
      {[](SweepOptions& o) { o.knobs.local_sgd_start_step = -5; },
       "--local_sgd_start_step: -5 is not >= 0"},
      {[](SweepOptions& o) { o.knobs.powersgd_min_compression_rate = 0.5; },
       "--powersgd_min_compression_rate: 0.5 is not a finite number >= 1"},
      {[](SweepOptions& o) { o.knobs.powersgd_seed = -1; },
       "--powersgd_seed: -1 is not >= 0"},
      {[](SweepOptions& o) { o.knobs.powersgd_seed = int64_t{1} << 32; },
       "--powersgd_seed: 4294967296 is beyond 2^32 - 1"},
      {[](SweepOptions& o) {
         o.comm_hooks = {"allreduce", "powersgd"};
         o.knobs.powersgd_start_step = 1;
       },
       "--powersgd_start_step: 1: PowerSGD needs at least 2 with error "
       "feedback or warm start"},
      {[](SweepOptions& o) { o.train_flags = {"bucket_cap_mb=5"}; },
       "--train_flags: 'bucket_cap_mb=5' is not a flag (--name or "
       "--name=value)"},
      {[](SweepOptions& o) { o.train_flags = {"--comm_hook=fp16"}; },
       "--train_flags: --comm_hook is set by the sweep for every run; use "
       "--comm_hooks"},
      {[](SweepOptions& o) { o.train_flags = {"--noshm"}; },
       "--train_flags: --noshm is set by the sweep for every run; use "
       "--backends"},
      {[](SweepOptions& o) { o.train_flags = {"--trace=/tmp/t.json"}; },
       "--train_flags: --trace is set by the sweep for every run; use "
       "--trace (a file per run in --output_dir's traces/)"},
      {[](SweepOptions& o) { o.train_flags = {"--batch_size=3"}; },
       "--train_flags: --batch_size is set by the sweep"},
      {[](SweepOptions& o) {
         o.knobs.static_graph = true;
         o.train_flags = {"--static_graph=false"};
       },
       "--train_flags: --static_graph is also given as the runner's own "
       "--static_graph; give it once"},
      {SetTrainFlags({"--lr=1", "--lr=2"}), "--train_flags: --lr given twice"},
      {[](SweepOptions& o) { o.train_flags = {"--data_dir=\"a\""}; },
       "--train_flags: '--data_dir=\"a\"' holds a comma, quote or line "
       "break"},
  };
  for (const Case& c : cases) {
    SweepOptions o;
    c.mutate(o);
    absl::StatusOr<SweepPlan> plan = PlanSweep(o);
    ASSERT_FALSE(plan.ok()) << c.message;
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(plan.status().message(), HasSubstr(c.message));
  }
}

TEST(SweepTest, BadOptionsNameTheFlag) {
  struct Case {
    void (*mutate)(SweepOptions&);
    const char* flag;
  };
  const Case cases[] = {
      {[](SweepOptions& o) { o.backends = {"mpi"}; }, "--backends"},
      {[](SweepOptions& o) { o.models = {"vgg"}; }, "--models"},
      {[](SweepOptions& o) { o.world_sizes = {0}; }, "--world_sizes"},
      {[](SweepOptions& o) { o.batch_sizes.assign(2, 64); }, "--batch_sizes"},
      {[](SweepOptions& o) { o.batch_sizes = {0}; }, "--batch_sizes"},
      {[](SweepOptions& o) { o.global_batch = 90; }, "--global_batch"},
      {[](SweepOptions& o) { o.repeats = 0; }, "--repeats"},
      {[](SweepOptions& o) { o.nnodes = 0; }, "--nnodes"},
      {[](SweepOptions& o) { o.node_rank = 1; }, "--node_rank"},
      {[](SweepOptions& o) {
         o.nnodes = 2;
         o.node_rank = 2;
         o.master_addr = "h";
       },
       "--node_rank"},
      {[](SweepOptions& o) { o.nnodes = 2; }, "--master_addr"},
      {[](SweepOptions& o) { o.master_port = 70000; }, "--master_port"},
      {[](SweepOptions& o) { o.master_port = 65530; }, "--master_port"},
  };
  for (const Case& c : cases) {
    SweepOptions o;
    c.mutate(o);
    absl::StatusOr<SweepPlan> plan = PlanSweep(o);
    ASSERT_FALSE(plan.ok()) << c.flag;
    EXPECT_THAT(plan.status().message(), HasSubstr(c.flag));
  }
}

// Issue #29: process counts, batches, nodes and repeats beyond what this
// machine (or any job) runs are refused naming the flag, the bound and why.
TEST(SweepTest, KnobsBeyondTheMachineAreRefused) {
  const base::Limit processes = base::LocalProcessLimit();
  const int too_many = static_cast<int>(processes.max + 1);
  struct Case {
    std::function<void(SweepOptions&)> mutate;
    std::string message;
  };
  const auto over_the_machine = [too_many](SweepOptions& o) {
    o.world_sizes = {1, too_many};
  };
  const Case cases[] = {
      {over_the_machine,
       absl::StrCat("--world_sizes=", too_many, ": ", too_many,
                    " processes per node (over 1 node): at most ",
                    processes.max, " (", processes.why, ")")},
      {[](SweepOptions& o) { o.world_sizes = {2000000}; },
       "--world_sizes=2000000: at most 1048576"},
      {[](SweepOptions& o) { o.nnodes = 2000000000; },
       "--nnodes=2000000000: at most 1048576"},
      {[](SweepOptions& o) { o.batch_sizes = {int64_t{1} << 40}; },
       "--batch_sizes=1099511627776: at most 1048576"},
      {[](SweepOptions& o) {
         o.world_sizes = {1};
         o.global_batch = int64_t{1} << 40;
       },
       "--global_batch: 1099511627776 over 1 processes is 1099511627776 per "
       "process: at most 1048576"},
      {[](SweepOptions& o) { o.repeats = 2000000000; },
       "--repeats=2000000000: at most 1000"},
  };
  for (const Case& c : cases) {
    SweepOptions o;
    c.mutate(o);
    absl::StatusOr<SweepPlan> plan = PlanSweep(o);
    ASSERT_FALSE(plan.ok()) << c.message;
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(plan.status().message(), HasSubstr(c.message));
  }
  SweepOptions most;
  most.world_sizes = {static_cast<int>(processes.max)};
  EXPECT_TRUE(PlanSweep(most).ok()) << PlanSweep(most).status();
}

}  // namespace
}  // namespace dtrain::experiments
