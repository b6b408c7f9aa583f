// DistributedDataParallel's knobs beyond the defaults of ddp_test.cc:
// gradients as bucket views (on by default) and off, static_graph, buckets
// padded to the world size, and the bfloat16 compression hook. Ranks are
// threads with Gloo on 127.0.0.1.
#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/optim/sgd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "dist/backend/backend.h"
#include "dist/backend/backend_testing.h"
#include "dist/ddp/ddp.h"
#include "dist/ddp/ddp_testing.h"
#include "dist/ddp/hooks/allreduce_hook.h"
#include "dist/ddp/hooks/compress_hook.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::ddp {
namespace {

using testing::Gloo;
using ::testing::HasSubstr;
using testing::Input;
using testing::Loss;
using testing::Mlp;
using testing::MlpOptions;

using backend::testing::RunRanks;

constexpr int kWorld = 2;

// Every rank's model starts as seed 10's (DDP broadcasts rank 0's anyway).
Mlp MakeModel(const MlpOptions& options = {}) {
  torch::manual_seed(10);
  return Mlp(options);
}

// The average over ranks of the local gradients of `steps` backward passes
// of rank r's input (scaled by the pass), computed without DDP.
std::vector<at::Tensor> Expected(const MlpOptions& options, int passes) {
  std::vector<at::Tensor> sum;
  for (int r = 0; r < kWorld; ++r) {
    Mlp model = MakeModel(options);
    for (int pass = 1; pass <= passes; ++pass) {
      Loss(model->forward(Input(r) * pass)).backward();
    }
    std::vector<at::Tensor> grads;
    for (auto& p : model->parameters()) grads.push_back(p.grad().clone());
    if (sum.empty()) {
      sum = grads;
    } else {
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += grads[i];
    }
  }
  for (auto& g : sum) g /= kWorld;
  return sum;
}

void ExpectGradients(const torch::nn::Module& model,
                     const std::vector<at::Tensor>& want,
                     const std::string& what) {
  const auto params = model.named_parameters();
  ASSERT_EQ(params.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const at::Tensor& got = params[i].value().grad();
    ASSERT_TRUE(got.defined()) << what << ": " << params[i].key();
    EXPECT_TRUE(got.allclose(want[i], 1e-5, 1e-6))
        << what << ": " << params[i].key();
  }
}

// How gradients are zeroed between steps; each must leave correct averages.
enum class Zeroing { kModuleInPlace, kOptimizer, kReset };

// With bucket views, every .grad of a bucket is a slice of one buffer, stays
// the same memory from step to step when zeroed in place, and holds the
// average; gradients that were reset or replaced are pointed back at the
// bucket. Without, each .grad is its own tensor. Both give the same averages.
TEST(DdpKnobsTest, GradientsAsBucketViewsOrNot) {
  const std::vector<at::Tensor> want = Expected({}, 1);
  for (bool view : {true, false}) {
    for (Zeroing zeroing :
         {Zeroing::kModuleInPlace, Zeroing::kOptimizer, Zeroing::kReset}) {
      const std::string what = absl::StrCat(
          view ? "view" : "copy", ", zeroing ", static_cast<int>(zeroing));
      std::vector<Mlp> models = {MakeModel(), MakeModel()};
      RunRanks(kWorld, Gloo(), [&](backend::Backend& b) {
        Mlp model = models[b.rank()];
        DdpOptions options;
        options.gradient_as_bucket_view = view;
        auto ddp = DistributedDataParallel::Create(model.ptr(), b, options);
        ASSERT_TRUE(ddp.ok()) << ddp.status();
        ASSERT_EQ((*ddp)->buckets().size(), 1u);
        torch::optim::SGD sgd(model->parameters(), /*lr=*/0.0);
        const void* fc1_grad = nullptr;
        for (int step = 1; step <= 3; ++step) {
          ASSERT_TRUE((*ddp)->PrepareForward().ok());
          Loss(model->forward(Input(b.rank()))).backward();
          ASSERT_TRUE((*ddp)->SynchronizeGradients().ok());
          ExpectGradients(*model, want, absl::StrCat(what, ", step ", step));
          const at::Tensor& g1 = model->fc1->weight.grad();
          const at::Tensor& g3 = model->fc3->bias.grad();
          EXPECT_EQ(g1.is_alias_of(g3), view) << what;
          if (view && zeroing == Zeroing::kModuleInPlace) {
            if (fc1_grad != nullptr) {
              EXPECT_EQ(g1.data_ptr(), fc1_grad);
            }
            fc1_grad = g1.data_ptr();
          }
          switch (zeroing) {
            case Zeroing::kModuleInPlace:
              model->zero_grad(/*set_to_none=*/false);
              break;
            case Zeroing::kOptimizer:
              // LibTorch 1.13 detaches and zeroes in place; 2.x resets.
              sgd.zero_grad();
              break;
            case Zeroing::kReset:
              for (auto& p : model->parameters()) p.mutable_grad().reset();
              break;
          }
        }
      });
    }
  }
}

// The allreduce hook, keeping each bucket's buffer and allocation as Setup
// sees them.
class RecordingHook : public hooks::AllReduceHook {
 public:
  absl::Status Setup(const std::vector<GradBucket>& buckets,
                     backend::Backend&) override {
    for (const GradBucket& b : buckets) {
      buffers.push_back(b.buffer);
      padded.push_back(b.padded);
    }
    return absl::OkStatus();
  }
  std::vector<at::Tensor> buffers;
  std::vector<at::Tensor> padded;
};

// Padded buckets (for an in-place reduce-scatter) hold N equal shares, the
// gradients first and zeros after them, and average as unpadded ones do.
TEST(DdpKnobsTest, BucketsPaddedToTheWorldSize) {
  constexpr int kThree = 3;
  std::vector<at::Tensor> want;
  for (int r = 0; r < kThree; ++r) {
    Mlp local = MakeModel();
    Loss(local->forward(Input(r))).backward();
    const auto params = local->parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      if (want.size() <= i) {
        want.push_back(params[i].grad().clone());
      } else {
        want[i] += params[i].grad();
      }
    }
  }
  for (at::Tensor& g : want) g /= kThree;
  for (bool pad : {false, true}) {
    std::vector<Mlp> models;
    for (int r = 0; r < kThree; ++r) models.push_back(MakeModel());
    RunRanks(kThree, Gloo(), [&](backend::Backend& b) {
      Mlp model = models[b.rank()];
      DdpOptions options;
      options.first_bucket_cap_bytes = 600;
      options.bucket_cap_bytes = 600;
      options.pad_buckets_to_world_size = pad;
      auto ddp = DistributedDataParallel::Create(model.ptr(), b, options);
      ASSERT_TRUE(ddp.ok()) << ddp.status();
      auto hook = std::make_shared<RecordingHook>();
      ASSERT_TRUE((*ddp)->RegisterCommHook(hook).ok());
      ASSERT_GE(hook->buffers.size(), 2u);
      bool some_padding = false;
      for (size_t k = 0; k < hook->buffers.size(); ++k) {
        const at::Tensor& buffer = hook->buffers[k];
        const at::Tensor& padded = hook->padded[k];
        const int64_t n = buffer.numel();
        EXPECT_EQ(n, (*ddp)->buckets()[k].numel);
        EXPECT_EQ(padded.numel(), pad ? (n + kThree - 1) / kThree * kThree : n)
            << "bucket " << k;
        EXPECT_EQ(buffer.data_ptr(), padded.data_ptr());
        some_padding = some_padding || padded.numel() > n;
      }
      EXPECT_EQ(some_padding, pad);
      ASSERT_TRUE((*ddp)->PrepareForward().ok());
      Loss(model->forward(Input(b.rank()))).backward();
      ASSERT_TRUE((*ddp)->SynchronizeGradients().ok());
      ExpectGradients(*model, want, pad ? "padded" : "unpadded");
      for (size_t k = 0; k < hook->padded.size(); ++k) {
        const int64_t n = hook->buffers[k].numel();
        const at::Tensor tail =
            hook->padded[k].narrow(0, n, hook->padded[k].numel() - n);
        EXPECT_EQ(tail.count_nonzero().item<int64_t>(), 0) << "bucket " << k;
      }
    });
  }
}

// A .grad that the bucket view replaced keeps its value: an existing
// gradient moves into the bucket at construction and is accumulated into.
TEST(DdpKnobsTest, ExistingGradientsMoveIntoTheBucket) {
  std::vector<Mlp> models = {MakeModel(), MakeModel()};
  RunRanks(kWorld, Gloo(), [&](backend::Backend& b) {
    Mlp model = models[b.rank()];
    for (auto& p : model->parameters()) p.mutable_grad() = at::ones_like(p);
    auto ddp = DistributedDataParallel::Create(model.ptr(), b);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    EXPECT_TRUE(model->fc1->weight.grad().is_alias_of(model->fc3->bias.grad()));
    EXPECT_EQ(model->fc2->bias.grad().sum().item<float>(),
              static_cast<float>(model->fc2->bias.numel()));
  });
}

// Two backward passes in one synchronised step (as reentrant activation
// checkpointing gives): refused without static_graph; with it, the first
// step learns the counts and every later step averages both passes and
// launches its buckets during backward.
TEST(DdpKnobsTest, StaticGraphAcceptsRepeatedGradients) {
  const std::vector<at::Tensor> want = Expected({}, 2);
  for (bool static_graph : {false, true}) {
    std::vector<Mlp> models = {MakeModel(), MakeModel()};
    RunRanks(kWorld, Gloo(), [&](backend::Backend& b) {
      Mlp model = models[b.rank()];
      DdpOptions options;
      options.static_graph = static_graph;
      options.first_bucket_cap_bytes = 300;
      auto ddp = DistributedDataParallel::Create(model.ptr(), b, options);
      ASSERT_TRUE(ddp.ok()) << ddp.status();
      const int buckets = static_cast<int>((*ddp)->buckets().size());
      ASSERT_GT(buckets, 1);
      for (int step = 1; step <= 3; ++step) {
        ASSERT_TRUE((*ddp)->PrepareForward().ok());
        Loss(model->forward(Input(b.rank()))).backward();
        Loss(model->forward(Input(b.rank()) * 2)).backward();
        absl::Status s = (*ddp)->SynchronizeGradients();
        if (!static_graph) {
          EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
          EXPECT_THAT(s.message(), HasSubstr("more than once"));
          EXPECT_THAT(s.message(), HasSubstr("static_graph"));
          return;
        }
        ASSERT_TRUE(s.ok()) << s;
        ExpectGradients(*model, want, absl::StrCat("step ", step));
        EXPECT_EQ((*ddp)->last_step_stats().buckets_launched_in_backward,
                  step == 1 ? 0 : buckets)
            << "step " << step;
        model->zero_grad(/*set_to_none=*/false);
      }
    });
  }
}

// With a static graph, a parameter known to be unused does not hold its
// bucket back: every bucket goes out during backward from the second step.
TEST(DdpKnobsTest, StaticGraphLaunchesBucketsWithUnusedParameters) {
  MlpOptions mlp;
  mlp.with_unused = true;
  std::vector<Mlp> models = {MakeModel(mlp), MakeModel(mlp)};
  RunRanks(kWorld, Gloo(), [&](backend::Backend& b) {
    Mlp model = models[b.rank()];
    DdpOptions options;
    options.static_graph = true;
    auto ddp = DistributedDataParallel::Create(model.ptr(), b, options);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    for (int step = 1; step <= 2; ++step) {
      ASSERT_TRUE((*ddp)->PrepareForward().ok());
      Loss(model->forward(Input(b.rank()))).backward();
      ASSERT_TRUE((*ddp)->SynchronizeGradients().ok());
      const StepStats& stats = (*ddp)->last_step_stats();
      EXPECT_EQ(stats.buckets_launched_in_backward,
                step == 1 ? 0 : stats.num_buckets);
      EXPECT_THAT(stats.unused_parameters,
                  ::testing::ElementsAre("unused.bias", "unused.weight"));
      EXPECT_EQ(model->unused->weight.grad().abs().max().item<float>(), 0.0f);
    }
  });
}

// A graph that changes after the first step is an error on every rank,
// naming the parameter, and the ranks stay in step for the next one.
TEST(DdpKnobsTest, StaticGraphThatChangesIsAnError) {
  MlpOptions mlp;
  mlp.with_extra = true;
  std::vector<Mlp> models = {MakeModel(mlp), MakeModel(mlp)};
  RunRanks(kWorld, Gloo(), [&](backend::Backend& b) {
    Mlp model = models[b.rank()];
    DdpOptions options;
    options.static_graph = true;
    auto ddp = DistributedDataParallel::Create(model.ptr(), b, options);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    for (bool use_extra : {true, false, true}) {
      ASSERT_TRUE((*ddp)->PrepareForward().ok());
      Loss(model->forward(Input(b.rank()), use_extra)).backward();
      absl::Status s = (*ddp)->SynchronizeGradients();
      if (use_extra) {
        EXPECT_TRUE(s.ok()) << s;
      } else {
        EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
        EXPECT_THAT(s.message(), HasSubstr("graph changed"));
        EXPECT_THAT(s.message(), HasSubstr("extra.weight"));
      }
      model->zero_grad(/*set_to_none=*/false);
    }
  });
}

// bfloat16 keeps 8 significant bits: close to the float32 average, not
// equal to it, and the buckets report half the bytes on the wire.
TEST(DdpKnobsTest, Bf16CompressionIsCloseToFloat32) {
  const std::vector<at::Tensor> want = Expected({}, 1);
  std::vector<Mlp> models = {MakeModel(), MakeModel()};
  RunRanks(kWorld, Gloo(), [&](backend::Backend& b) {
    Mlp model = models[b.rank()];
    auto ddp = DistributedDataParallel::Create(model.ptr(), b);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    ASSERT_TRUE((*ddp)->RegisterCommHook(hooks::Bf16CompressHook()).ok());
    EXPECT_EQ((*ddp)->comm_hook().name(), "bf16");
    for (const BucketInfo& bucket : (*ddp)->buckets())
      EXPECT_EQ(bucket.communicated_bytes * 2, bucket.bytes);
    // Once only, and only before the first step.
    EXPECT_EQ((*ddp)->RegisterCommHook(hooks::Fp16CompressHook()).code(),
              absl::StatusCode::kFailedPrecondition);
    ASSERT_TRUE((*ddp)->PrepareForward().ok());
    Loss(model->forward(Input(b.rank()))).backward();
    ASSERT_TRUE((*ddp)->SynchronizeGradients().ok());
    const auto params = model->named_parameters();
    bool exact = true;
    for (size_t i = 0; i < want.size(); ++i) {
      const at::Tensor got = params[i].value().grad();
      const double scale = want[i].abs().max().item<double>();
      EXPECT_LE((got - want[i]).abs().max().item<double>(), 1e-2 * scale)
          << params[i].key();
      exact = exact && got.equal(want[i]);
    }
    EXPECT_FALSE(exact) << "suspiciously exact for bfloat16";
  });
}

}  // namespace
}  // namespace dtrain::ddp
