#include "experiments/sweep.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::experiments {
namespace {

using ::testing::HasSubstr;

TEST(SweepTest, DefaultIsTheBooksExperimentPlusResNetAndBounds) {
  absl::StatusOr<SweepPlan> plan = PlanSweep(SweepOptions());
  ASSERT_TRUE(plan.ok()) << plan.status();
  // Per model: 1, 2, 4 processes synchronised, 2 and 4 without sync.
  ASSERT_EQ(plan->runs.size(), 10u);
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
  o.models = {"convnet"};
  o.global_batch = 256;
  o.repeats = 2;
  o.bound = false;
  o.reference_pytorch = true;
  absl::StatusOr<SweepPlan> plan = PlanSweep(o);
  ASSERT_TRUE(plan.ok());
  // 3 world sizes x 2 implementations x 2 repeats.
  ASSERT_EQ(plan->runs.size(), 12u);
  EXPECT_EQ(plan->runs[0].batch_size, 256);
  EXPECT_EQ(plan->runs[1].repeat, 1);
  EXPECT_EQ(plan->runs[2].implementation, "pytorch");
  EXPECT_EQ(plan->runs[11].batch_size, 64);
  EXPECT_EQ(plan->runs[11].Slug(), "pytorch_gloo_convnet_np4_bs64_sync_r1");
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
      {[](SweepOptions& o) { o.batch_sizes.pop_back(); }, "--batch_sizes"},
      {[](SweepOptions& o) { o.global_batch = 90; }, "--global_batch"},
      {[](SweepOptions& o) { o.repeats = 0; }, "--repeats"},
  };
  for (const Case& c : cases) {
    SweepOptions o;
    c.mutate(o);
    absl::StatusOr<SweepPlan> plan = PlanSweep(o);
    ASSERT_FALSE(plan.ok()) << c.flag;
    EXPECT_THAT(plan.status().message(), HasSubstr(c.flag));
  }
}

}  // namespace
}  // namespace dtrain::experiments
