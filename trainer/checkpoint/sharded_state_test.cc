// ZeRO's state in checkpoints, ranks as threads: a ZeRO run's checkpoint is
// byte for byte the checkpoint of unsharded DDP after the same steps (stage
// 1 on Gloo, stages 1 and 2 on shared memory, where the reduce-scatter has
// the allreduce's bits); a checkpoint resumes on another number of ranks,
// with ZeRO or without, exactly as unsharded DDP resumes it; optimizers
// that do not fit are refused on every rank.

#include "trainer/checkpoint/sharded_state.h"

#include <ATen/ATen.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/torch_compat.h"
#include "dist/backend/backend_testing.h"
#include "dist/ddp/ddp.h"
#include "dist/ddp/ddp_testing.h"
#include "dist/zero/sharded_optimizer.h"
#include "dist/zero/zero_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/checkpoint/checkpoint.h"
#include "trainer/checkpoint/checkpoint_testing.h"

namespace dtrain::trainer {
namespace {

using backend::testing::BackendFactory;
using backend::testing::RunRanks;
using ddp::testing::Input;
using ddp::testing::Loss;
using ddp::testing::Mlp;
using testing::BitwiseEqual;
using ::testing::HasSubstr;
using zero::testing::SmallBuckets;

std::unique_ptr<torch::optim::Optimizer> Adam(std::vector<at::Tensor> p) {
  return std::make_unique<torch::optim::Adam>(
      p, torch::optim::AdamOptions(0.01).weight_decay(0.01).amsgrad(true));
}

std::unique_ptr<torch::optim::Optimizer> Sgd(std::vector<at::Tensor> p) {
  return std::make_unique<torch::optim::SGD>(
      p, torch::optim::SGDOptions(0.1).momentum(0.9));
}

struct Run {
  int world = 2;
  BackendFactory factory;
  int stage = 0;  // 0: DDP without ZeRO
  int steps = 3;
  const std::string* resume = nullptr;  // a checkpoint to start from
  int64_t first_step = 0;               // the resumed checkpoint's step
};

struct Result {
  std::string checkpoint;  // rank 0's, after the steps
  std::vector<std::map<std::string, at::Tensor>> params;  // per rank
};

Result Train(const Run& run) {
  std::vector<Mlp> models;
  for (int r = 0; r < run.world; ++r) {
    torch::manual_seed(10);
    models.emplace_back();
  }
  Result out;
  out.params.resize(run.world);
  RunRanks(run.world, run.factory, [&](backend::Backend& b) {
    Mlp model = models[b.rank()];
    auto ddp =
        ddp::DistributedDataParallel::Create(model.ptr(), b, SmallBuckets());
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    std::unique_ptr<zero::ShardedOptimizer> zero;
    if (run.stage > 0) {
      auto z = zero::ShardedOptimizer::Create(**ddp, {run.stage}, Adam);
      ASSERT_TRUE(z.ok()) << z.status();
      zero = *std::move(z);
    }
    // Without ZeRO, the optimizer; with it, the unsharded one of checkpoints.
    std::unique_ptr<torch::optim::Optimizer> full = Adam(model->parameters());
    if (run.resume != nullptr) {
      auto state = DecodeCheckpoint(*run.resume, *model, *full);
      ASSERT_TRUE(state.ok()) << state.status();
      if (zero != nullptr) {
        const absl::Status s = ScatterShardedState(*full, *zero);
        ASSERT_TRUE(s.ok()) << s;
        full->state().clear();
      }
    }
    for (int step = 0; step < run.steps; ++step) {
      ASSERT_TRUE((*ddp)->PrepareForward().ok());
      Loss(model->forward(Input(b.rank()))).backward();
      ASSERT_TRUE((*ddp)->SynchronizeGradients().ok());
      if (zero != nullptr) {
        const absl::Status s = zero->Step();
        ASSERT_TRUE(s.ok()) << s;
      } else {
        full->step();
      }
      model->zero_grad(/*set_to_none=*/false);
    }
    if (zero != nullptr) {
      const absl::Status s =
          GatherShardedState(*zero, b.rank() == 0 ? full.get() : nullptr);
      ASSERT_TRUE(s.ok()) << s;
    }
    if (b.rank() == 0) {
      TrainingState state;
      state.global_step = run.first_step + run.steps;
      state.optimizer_name = "adam";
      auto bytes = EncodeCheckpoint(*model, *full, state);
      ASSERT_TRUE(bytes.ok()) << bytes.status();
      out.checkpoint = *std::move(bytes);
    }
    for (const auto& item : model->named_parameters()) {
      out.params[b.rank()][item.key()] = item.value().detach().clone();
    }
  });
  return out;
}

void ExpectSameParams(const Result& got, const Result& want,
                      const std::string& what) {
  ASSERT_EQ(got.params.size(), want.params.size()) << what;
  for (size_t r = 0; r < want.params.size(); ++r) {
    for (const auto& [name, value] : want.params[r]) {
      EXPECT_TRUE(BitwiseEqual(got.params[r].at(name), value))
          << what << ": rank " << r << " " << name;
    }
  }
}

TEST(ShardedStateTest, CheckpointIsUnshardedDdpsByteForByte) {
  struct Case {
    std::string name;
    BackendFactory factory;
    int world;
    std::vector<int> stages;
  };
  for (const Case& c : {Case{"shm", ddp::testing::Shm(), 3, {1, 2}},
                        Case{"gloo", ddp::testing::Gloo(), 2, {1}}}) {
    const Result want = Train({c.world, c.factory, 0});
    ASSERT_FALSE(want.checkpoint.empty());
    for (int stage : c.stages) {
      const Result got = Train({c.world, c.factory, stage});
      EXPECT_TRUE(got.checkpoint == want.checkpoint)
          << c.name << " stage " << stage << ": the checkpoints differ";
    }
  }
}

TEST(ShardedStateTest, ResumesOnOtherWorldSizesAsUnshardedDdpDoes) {
  const BackendFactory shm = ddp::testing::Shm();
  // Written by ZeRO on 2 ranks, and by ZeRO on 4.
  const Result by_two = Train({2, shm, 1});
  const Result by_four = Train({4, shm, 2});
  struct Case {
    const std::string* checkpoint;
    int world;
  };
  for (const Case& c :
       {Case{&by_two.checkpoint, 4}, Case{&by_two.checkpoint, 3},
        Case{&by_four.checkpoint, 2}}) {
    const Result want = Train({c.world, shm, 0, 2, c.checkpoint, 3});
    for (int stage : {1, 2}) {
      const Result got = Train({c.world, shm, stage, 2, c.checkpoint, 3});
      const std::string what =
          absl::StrCat("resumed on ", c.world, " ranks with stage ", stage);
      ExpectSameParams(got, want, what);
      EXPECT_TRUE(got.checkpoint == want.checkpoint) << what;
    }
  }
}

TEST(ShardedStateTest, RefusesOptimizersThatDoNotFitOnEveryRank) {
  RunRanks(2, ddp::testing::Shm(), [&](backend::Backend& b) {
    torch::manual_seed(10);
    Mlp model;
    auto ddp =
        ddp::DistributedDataParallel::Create(model.ptr(), b, SmallBuckets());
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    auto zero = zero::ShardedOptimizer::Create(**ddp, {1}, Adam);
    ASSERT_TRUE(zero.ok()) << zero.status();
    ASSERT_TRUE((*ddp)->PrepareForward().ok());
    Loss(model->forward(Input(b.rank()))).backward();
    ASSERT_TRUE((*ddp)->SynchronizeGradients().ok());
    ASSERT_TRUE((*zero)->Step().ok());

    // Rank 0's unsharded optimizer is SGD: every rank fails, none hangs.
    std::unique_ptr<torch::optim::Optimizer> sgd = Sgd(model->parameters());
    const absl::Status gathered =
        GatherShardedState(**zero, b.rank() == 0 ? sgd.get() : nullptr);
    EXPECT_EQ(gathered.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(
        std::string(gathered.message()),
        HasSubstr(b.rank() == 0 ? "the unsharded optimizer is not "
                                  "torch::optim::Adam"
                                : "the unsharded optimizer of the rank that "
                                  "gathers the state does not fit"));
    EXPECT_EQ(ScatterShardedState(*sgd, **zero).code(),
              absl::StatusCode::kInvalidArgument);

    // State for some parameters only.
    std::unique_ptr<torch::optim::Optimizer> full = Adam(model->parameters());
    ASSERT_TRUE(GatherShardedState(**zero, full.get()).ok());
    full->state().erase(
        torch_compat::OptimizerStateKeyOf(model->parameters().front()));
    const absl::Status partial = ScatterShardedState(*full, **zero);
    EXPECT_EQ(partial.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(partial.message()),
                HasSubstr("have no optimizer state and the others have"));

    // No state at all (a checkpoint from before the first step) clears it.
    full->state().clear();
    ASSERT_TRUE(ScatterShardedState(*full, **zero).ok());
    EXPECT_TRUE((*zero)->optimizer().state().empty());
  });
}

}  // namespace
}  // namespace dtrain::trainer
