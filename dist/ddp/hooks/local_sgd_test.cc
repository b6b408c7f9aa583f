// Post-local SGD: LocalSgdHook averages gradients for its first steps and
// then none; PeriodicModelAverager averages the parameters every period
// steps after its warm-up. Ranks are threads with Gloo on 127.0.0.1.
#include <ATen/ATen.h>
#include <torch/optim/sgd.h>

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "dist/backend/backend_testing.h"
#include "dist/ddp/ddp.h"
#include "dist/ddp/ddp_testing.h"
#include "dist/ddp/hooks/local_sgd_hook.h"
#include "dist/ddp/model_averager.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::ddp {
namespace {

using testing::Gloo;
using ::testing::HasSubstr;
using testing::Input;
using testing::Loss;
using testing::Mlp;

using backend::testing::RunRanks;

constexpr int kWorld = 2;

// Each rank's fc1.weight after each step, per rank.
using History = std::vector<std::vector<at::Tensor>>;

// Steps 1-2 average gradients, so the ranks' parameters agree; from step 3
// they do not (each rank steps on its own gradients, and its input
// differs). The averager (warm-up 2, period 3: its calls 2 and 5, counting
// from 0, are due) averages after steps 3 and 6: the parameters then equal
// the mean of the ranks' local ones.
TEST(LocalSgdTest, GlobalThenLocalThenAveraged) {
  std::vector<Mlp> models;
  for (int r = 0; r < kWorld; ++r) {
    torch::manual_seed(10);
    models.emplace_back();
  }
  History before(kWorld), after(kWorld);
  RunRanks(kWorld, Gloo(), [&](backend::Backend& b) {
    Mlp model = models[b.rank()];
    auto ddp = DistributedDataParallel::Create(model.ptr(), b);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    auto hook = std::make_shared<hooks::LocalSgdHook>(/*start_step=*/2);
    ASSERT_TRUE((*ddp)->RegisterCommHook(hook).ok());
    EXPECT_EQ((*ddp)->buckets()[0].communicated_bytes, 0);
    PeriodicModelAverager averager(b, {/*period=*/3, /*warmup_steps=*/2});
    torch::optim::SGD sgd(model->parameters(), /*lr=*/0.5);
    for (int step = 1; step <= 6; ++step) {
      ASSERT_TRUE((*ddp)->PrepareForward().ok());
      Loss(model->forward(Input(b.rank()))).backward();
      ASSERT_TRUE((*ddp)->SynchronizeGradients().ok());
      sgd.step();
      before[b.rank()].push_back(model->fc1->weight.detach().clone());
      ASSERT_TRUE(averager.AverageParameters(model->parameters()).ok());
      after[b.rank()].push_back(model->fc1->weight.detach().clone());
      model->zero_grad(/*set_to_none=*/false);
    }
    EXPECT_EQ(hook->steps(), 6);
    EXPECT_EQ(averager.step(), 6);
  });
  for (int i = 0; i < 6; ++i) {
    const int step = i + 1;
    EXPECT_EQ(before[0][i].equal(before[1][i]), step <= 2) << step;
    const bool averaged = step == 3 || step == 6;
    EXPECT_EQ(after[0][i].equal(after[1][i]), step <= 2 || averaged) << step;
    if (averaged) {
      const at::Tensor mean = (before[0][i] + before[1][i]) / 2;
      EXPECT_TRUE(after[0][i].allclose(mean, 1e-6, 1e-7));
    }
  }
}

// The hook's step count survives a checkpoint; bad state is refused.
TEST(LocalSgdTest, StateRoundTrips) {
  hooks::LocalSgdHook hook(/*start_step=*/10);
  hooks::LocalSgdHook restored(/*start_step=*/10);
  ASSERT_TRUE(restored.LoadState(hook.State()).ok());
  EXPECT_EQ(restored.steps(), 0);
  auto state = hook.State();
  state[0].second.fill_(7);
  ASSERT_TRUE(restored.LoadState(state).ok());
  EXPECT_EQ(restored.steps(), 7);
  state[0].second = at::zeros({2});
  EXPECT_EQ(restored.LoadState(state).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(restored.LoadState({}).code(), absl::StatusCode::kInvalidArgument);
}

TEST(LocalSgdTest, BadOptionsAreRefused) {
  RunRanks(1, Gloo(), [&](backend::Backend& b) {
    PeriodicModelAverager zero_period(b, {/*period=*/0, /*warmup_steps=*/0});
    absl::Status s = zero_period.Validate();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("period"));
    PeriodicModelAverager negative(b, {/*period=*/2, /*warmup_steps=*/-1});
    EXPECT_EQ(negative.AverageParameters({}).code(),
              absl::StatusCode::kInvalidArgument);
    hooks::LocalSgdHook hook(/*start_step=*/-1);
    EXPECT_EQ(hook.Setup({}, b).code(), absl::StatusCode::kInvalidArgument);
  });
}

}  // namespace
}  // namespace dtrain::ddp
