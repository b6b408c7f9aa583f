// ZeRO stages 1 and 2 against unsharded DDP, ranks as threads: the same
// parameters after training with SGD (momentum) and Adam, on the shared-
// memory, Gloo and two-host backends; each rank's optimizer state is its
// share of every bucket; replicas stay identical; bad options are refused.
//
// Bit for bit: stage 1 everywhere (DDP's own averaged gradients, stepped
// element-wise) and stage 2 on shared memory (its reduce-scatter has its
// allreduce's bits). Within float tolerance: stage 2 over Gloo and two hosts,
// whose reduce-scatter sums in another order than their allreduce.

#include "dist/zero/sharded_optimizer.h"

#include <ATen/ATen.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/torch_compat.h"
#include "dist/backend/backend_testing.h"
#include "dist/ddp/ddp.h"
#include "dist/ddp/ddp_testing.h"
#include "dist/ddp/hooks/compress_hook.h"
#include "dist/zero/zero_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::zero {
namespace {

using backend::testing::BackendFactory;
using backend::testing::RunRanks;
using ddp::testing::Input;
using ddp::testing::Loss;
using ddp::testing::Mlp;
using ::testing::HasSubstr;
using testing::SmallBuckets;

constexpr int kSteps = 5;

enum class Kind { kSgd, kAdam };

std::unique_ptr<torch::optim::Optimizer> MakeOptimizer(
    Kind kind, std::vector<at::Tensor> params) {
  if (kind == Kind::kSgd) {
    return std::make_unique<torch::optim::SGD>(
        params, torch::optim::SGDOptions(0.1).momentum(0.9));
  }
  return std::make_unique<torch::optim::Adam>(
      params, torch::optim::AdamOptions(0.01).weight_decay(0.01));
}

struct Trained {
  // Per rank: every parameter after training, by name.
  std::vector<std::map<std::string, at::Tensor>> params;
  // Per rank: elements its optimizer keeps state for (Adam: two per element).
  std::vector<int64_t> state_numel;
  std::vector<int64_t> shard_numel;
  // Per rank, stage 1: whether every share's gradient was a view of DDP's
  // bucket (no copy) at the last step.
  // char, not bool: the ranks write their entries at once, and
  // vector<bool> packs them into shared words.
  std::vector<char> grads_in_bucket;
};

// Trains the MLP `kSteps` steps on `world` ranks; stage 0 is unsharded DDP.
// `views`: DDP's gradient_as_bucket_view.
Trained Train(int world, const BackendFactory& factory, int stage, Kind kind,
              bool views = true) {
  std::vector<Mlp> models;
  for (int r = 0; r < world; ++r) {
    torch::manual_seed(10);
    models.emplace_back();
  }
  Trained out;
  out.params.resize(world);
  out.state_numel.resize(world);
  out.shard_numel.resize(world);
  out.grads_in_bucket.resize(world);
  ddp::DdpOptions options = SmallBuckets();
  options.gradient_as_bucket_view = views;
  RunRanks(world, factory, [&](backend::Backend& b) {
    Mlp model = models[b.rank()];
    auto ddp = ddp::DistributedDataParallel::Create(model.ptr(), b, options);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    ASSERT_GE((*ddp)->buckets().size(), 2u);
    std::unique_ptr<ShardedOptimizer> zero;
    std::unique_ptr<torch::optim::Optimizer> plain;
    if (stage > 0) {
      auto z = ShardedOptimizer::Create(
          **ddp, {stage},
          [kind](std::vector<at::Tensor> p) { return MakeOptimizer(kind, p); });
      ASSERT_TRUE(z.ok()) << z.status();
      zero = *std::move(z);
    } else {
      plain = MakeOptimizer(kind, model->parameters());
    }
    for (int step = 0; step < kSteps; ++step) {
      ASSERT_TRUE((*ddp)->PrepareForward().ok());
      Loss(model->forward(Input(b.rank()))).backward();
      ASSERT_TRUE((*ddp)->SynchronizeGradients().ok());
      if (zero != nullptr) {
        const absl::Status s = zero->Step();
        ASSERT_TRUE(s.ok()) << s;
      } else {
        plain->step();
      }
      model->zero_grad(/*set_to_none=*/false);
    }
    torch::optim::Optimizer& o = zero != nullptr ? zero->optimizer() : *plain;
    int64_t state = 0;
    for (const auto& group : o.param_groups()) {
      for (const at::Tensor& p : group.params()) {
        auto it = o.state().find(torch_compat::OptimizerStateKeyOf(p));
        if (it == o.state().end()) continue;
        if (kind == Kind::kAdam) {
          auto& s = static_cast<torch::optim::AdamParamState&>(*it->second);
          state += s.exp_avg().numel() + s.exp_avg_sq().numel();
        } else {
          auto& s = static_cast<torch::optim::SGDParamState&>(*it->second);
          state += s.momentum_buffer().numel();
        }
      }
    }
    out.state_numel[b.rank()] = state;
    out.shard_numel[b.rank()] = zero != nullptr ? zero->shard_numel() : 0;
    if (zero != nullptr) {
      bool in_bucket = true;
      for (size_t k = 0; k < zero->shares().size(); ++k) {
        const at::Tensor& share = zero->shares()[k];
        if (share.numel() == 0) continue;
        const at::Tensor& grad =
            zero->bucket_parameters()[k][zero->shards()[k].pieces[0].param]
                .grad();
        in_bucket = in_bucket && share.grad().defined() &&
                    share.grad().storage().is_alias_of(grad.storage());
      }
      out.grads_in_bucket[b.rank()] = in_bucket;
    }
    for (const auto& item : model->named_parameters()) {
      out.params[b.rank()][item.key()] = item.value().detach().clone();
    }
  });
  return out;
}

struct Backends {
  std::string name;
  BackendFactory factory;
  int world;
  bool stage2_exact;  // its reduce-scatter has its allreduce's bits
};

std::vector<Backends> AllBackends() {
  return {{"shm", ddp::testing::Shm(), 3, true},
          {"gloo", ddp::testing::Gloo(), 2, false},
          {"two hosts", ddp::testing::TwoHosts(), 4, false}};
}

TEST(ShardedOptimizerTest, FollowsUnshardedDdp) {
  constexpr int64_t kModelNumel = 8 * 16 + 16 + 16 * 16 + 16 + 16 * 4 + 4;
  for (const Backends& be : AllBackends()) {
    for (Kind kind : {Kind::kSgd, Kind::kAdam}) {
      const std::string what =
          absl::StrCat(be.name, kind == Kind::kSgd ? " SGD" : " Adam");
      const Trained want = Train(be.world, be.factory, 0, kind);
      for (int stage : {1, 2}) {
        const Trained got = Train(be.world, be.factory, stage, kind);
        const bool exact = stage == 1 || be.stage2_exact;
        int64_t shards = 0;
        for (int r = 0; r < be.world; ++r) {
          for (const auto& [name, value] : want.params[r]) {
            const at::Tensor& g = got.params[r].at(name);
            if (exact) {
              EXPECT_TRUE(at::equal(g, value))
                  << what << " stage " << stage << " rank " << r << " " << name
                  << ": max difference "
                  << (g - value).abs().max().item<float>();
            } else {
              EXPECT_TRUE(at::allclose(g, value, 1e-5, 1e-6))
                  << what << " stage " << stage << " rank " << r << " " << name;
            }
            // Replicas stay identical.
            EXPECT_TRUE(at::equal(g, got.params[0].at(name)));
          }
          // The optimizer keeps state for this rank's share only.
          const int per_element = kind == Kind::kAdam ? 2 : 1;
          EXPECT_EQ(got.state_numel[r], per_element * got.shard_numel[r]);
          EXPECT_EQ(want.state_numel[r], per_element * kModelNumel);
          shards += got.shard_numel[r];
        }
        EXPECT_EQ(shards, kModelNumel) << what << " stage " << stage;
        if (stage == 1) {
          for (int r = 0; r < be.world; ++r) {
            EXPECT_TRUE(got.grads_in_bucket[r])
                << what << " rank " << r << ": a share's gradient was copied";
          }
        }
      }
      // Without bucket views, stage 1 copies the gradients of a share that
      // spans several parameters out of .grad (a share inside one parameter
      // is still a view, of that parameter's .grad), to the same parameters.
      const Trained copied = Train(be.world, be.factory, 1, kind, false);
      bool some_copied = false;
      for (int r = 0; r < be.world; ++r) {
        some_copied = some_copied || !copied.grads_in_bucket[r];
        for (const auto& [name, value] : want.params[r]) {
          EXPECT_TRUE(at::equal(copied.params[r].at(name), value))
              << what << " without bucket views, rank " << r << " " << name;
        }
      }
      EXPECT_TRUE(some_copied) << what;
    }
  }
}

// Stage 2 clips by the norm over every rank's shares, as clip_grad_norm_
// over the averaged gradients does without ZeRO (within the rounding of
// another summation order); AnyRank agrees on one rank's finding.
TEST(ShardedOptimizerTest, Stage2ClipsByTheNormOverEveryShare) {
  constexpr int kWorld = 3;
  constexpr double kMaxNorm = 0.05;
  std::vector<std::map<std::string, at::Tensor>> params[2];
  std::vector<double> norms[2];
  for (int stage : {0, 2}) {
    std::vector<Mlp> models;
    for (int r = 0; r < kWorld; ++r) {
      torch::manual_seed(10);
      models.emplace_back();
    }
    auto& out = params[stage / 2];
    auto& norm = norms[stage / 2];
    out.resize(kWorld);
    norm.resize(kWorld);
    RunRanks(kWorld, ddp::testing::Shm(), [&](backend::Backend& b) {
      Mlp model = models[b.rank()];
      auto ddp =
          ddp::DistributedDataParallel::Create(model.ptr(), b, SmallBuckets());
      ASSERT_TRUE(ddp.ok()) << ddp.status();
      std::unique_ptr<ShardedOptimizer> zero;
      std::unique_ptr<torch::optim::Optimizer> plain;
      if (stage == 2) {
        auto z =
            ShardedOptimizer::Create(**ddp, {2}, [](std::vector<at::Tensor> p) {
              return MakeOptimizer(Kind::kSgd, p);
            });
        ASSERT_TRUE(z.ok()) << z.status();
        zero = *std::move(z);
        auto any = zero->AnyRank(b.rank() == 1);
        ASSERT_TRUE(any.ok()) << any.status();
        EXPECT_TRUE(*any) << "rank " << b.rank();
      } else {
        plain = MakeOptimizer(Kind::kSgd, model->parameters());
      }
      for (int step = 0; step < 2; ++step) {
        ASSERT_TRUE((*ddp)->PrepareForward().ok());
        Loss(model->forward(Input(b.rank()))).backward();
        ASSERT_TRUE((*ddp)->SynchronizeGradients().ok());
        if (zero != nullptr) {
          auto n = zero->ClipShareGradNorm(kMaxNorm);
          ASSERT_TRUE(n.ok()) << n.status();
          norm[b.rank()] = *n;
          ASSERT_TRUE(zero->Step().ok());
        } else {
          norm[b.rank()] =
              torch::nn::utils::clip_grad_norm_(model->parameters(), kMaxNorm);
          plain->step();
        }
        model->zero_grad(/*set_to_none=*/false);
      }
      for (const auto& item : model->named_parameters()) {
        out[b.rank()][item.key()] = item.value().detach().clone();
      }
    });
  }
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_GT(norms[0][r], kMaxNorm) << "the test must clip";
    EXPECT_NEAR(norms[1][r], norms[0][r], 1e-5 * norms[0][r]) << "rank " << r;
    for (const auto& [name, value] : params[0][r]) {
      EXPECT_TRUE(at::allclose(params[1][r].at(name), value, 1e-5, 1e-6))
          << "rank " << r << " " << name;
    }
  }
}

TEST(ShardedOptimizerTest, RefusesBadStagesAndAStage2WithAHook) {
  RunRanks(2, ddp::testing::Gloo(), [&](backend::Backend& b) {
    Mlp model;
    auto adam = [](std::vector<at::Tensor> p) {
      return MakeOptimizer(Kind::kAdam, p);
    };
    ddp::DdpOptions unpadded = SmallBuckets();
    unpadded.pad_buckets_to_world_size = false;
    auto plain = ddp::DistributedDataParallel::Create(model.ptr(), b, unpadded);
    ASSERT_TRUE(plain.ok()) << plain.status();
    auto in_place = ShardedOptimizer::Create(**plain, {2}, adam);
    EXPECT_EQ(in_place.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(in_place.status().message()),
                HasSubstr("create DDP with "
                          "DdpOptions::pad_buckets_to_world_size"));
    plain->reset();

    auto ddp =
        ddp::DistributedDataParallel::Create(model.ptr(), b, SmallBuckets());
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    auto three = ShardedOptimizer::Create(**ddp, {3}, adam);
    EXPECT_EQ(three.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(three.status().message()),
                HasSubstr(absl::StrCat("[rank ", b.rank(),
                                       "] zero: stage 3 is not 1")));
    ASSERT_TRUE((*ddp)->RegisterCommHook(ddp::hooks::Fp16CompressHook()).ok());
    auto two = ShardedOptimizer::Create(**ddp, {2}, adam);
    EXPECT_EQ(two.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(two.status().message()),
                HasSubstr("already has the 'fp16' hook"));
    auto none =
        ShardedOptimizer::Create(**ddp, {1}, [](std::vector<at::Tensor>) {
          return std::unique_ptr<torch::optim::Optimizer>();
        });
    EXPECT_THAT(std::string(none.status().message()),
                HasSubstr("the optimizer factory made no optimizer"));
  });
}

}  // namespace
}  // namespace dtrain::zero
