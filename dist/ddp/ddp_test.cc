// DistributedDataParallel behaviour other than equivalence (see
// ddp_equivalence_test.cc): bucket layout, in-order launch and overlap with
// backward, unused parameters, the cross-rank model check, buffer broadcast,
// fp16 compression, failures as Status, usage errors. Ranks are threads with
// Gloo on 127.0.0.1; every collective is bounded by a timeout.

#include "dist/ddp/ddp.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/linear.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "dist/backend/backend_testing.h"
#include "dist/backend/shm/shm_backend.h"
#include "dist/ddp/ddp_testing.h"
#include "dist/ddp/hooks/compress_hook.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::ddp {
namespace {

using ::testing::ElementsAre;
using testing::EventLog;
using testing::Gloo;
using ::testing::HasSubstr;
using testing::Input;
using testing::Loss;
using testing::Mlp;
using testing::MlpOptions;
using testing::RecordingBackend;
using testing::Shm;

using backend::testing::RunRanks;

std::vector<Mlp> MakeModels(int world, const MlpOptions& options = {}) {
  std::vector<Mlp> models;
  for (int r = 0; r < world; ++r) {
    torch::manual_seed(10 + r);
    models.emplace_back(options);
  }
  return models;
}

// The average of the ranks' local gradients, computed without DDP: each
// rank's model built like rank 0's (`seed`), its own input, `extra` used on
// the ranks `use_extra` says. In registration order; zeros where undefined.
std::vector<at::Tensor> AverageLocalGradients(
    uint64_t seed, const MlpOptions& options, int world,
    const std::function<bool(int)>& use_extra = [](int) { return false; }) {
  std::vector<at::Tensor> sum;
  for (int r = 0; r < world; ++r) {
    torch::manual_seed(seed);
    Mlp copy(options);
    Loss(copy->forward(Input(r), use_extra(r))).backward();
    std::vector<at::Tensor> grads;
    for (auto& p : copy->parameters())
      grads.push_back(p.grad().defined() ? p.grad() : at::zeros_like(p));
    if (sum.empty()) {
      sum = grads;
    } else {
      for (size_t i = 0; i < sum.size(); ++i) sum[i] = sum[i] + grads[i];
    }
  }
  for (auto& g : sum) g = g / world;
  return sum;
}

void ExpectGradientsNear(const torch::nn::Module& model,
                         const std::vector<at::Tensor>& want, double tol,
                         const std::string& what) {
  const auto params = model.named_parameters();
  ASSERT_EQ(params.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const at::Tensor& got = params[i].value().grad();
    ASSERT_TRUE(got.defined()) << what << ": " << params[i].key();
    EXPECT_LE((got - want[i]).abs().max().item<double>(), tol)
        << what << ": " << params[i].key();
  }
}

// Bucket layout, in-order launch, and launch during backward: with small caps
// there are several buckets, the first is launched before the gradient of the
// model's input (the last thing backward computes) exists, and every bucket is
// launched by the hooks, none by SynchronizeGradients.
TEST(DdpTest, BucketsLaunchInOrderWhileBackwardRuns) {
  constexpr int kWorld = 2;
  auto models = MakeModels(kWorld);
  RunRanks(kWorld, Gloo(), [&](backend::Backend& inner) {
    EventLog log;
    RecordingBackend b(inner, &log);
    DdpOptions options;
    options.first_bucket_cap_bytes = 300;
    options.bucket_cap_bytes = 600;
    auto ddp =
        DistributedDataParallel::Create(models[b.rank()].ptr(), b, options);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    const auto& buckets = (*ddp)->buckets();
    ASSERT_EQ(buckets.size(), 3u);
    // fc2.bias takes the first bucket past its 300 B cap and closes it.
    EXPECT_THAT(buckets[0].parameters,
                ElementsAre("fc3.bias", "fc3.weight", "fc2.bias"));
    EXPECT_THAT(buckets[1].parameters, ElementsAre("fc2.weight"));
    EXPECT_THAT(buckets[2].parameters, ElementsAre("fc1.bias", "fc1.weight"));
    EXPECT_EQ(buckets[0].bytes, (4 + 64 + 16) * 4);
    EXPECT_EQ(buckets[1].bytes, 256 * 4);  // Over the cap, alone.

    for (int step = 1; step <= 3; ++step) {
      const size_t before = log.events().size();
      ASSERT_TRUE((*ddp)->PrepareForward().ok());
      at::Tensor x = Input(b.rank()).requires_grad_(true);
      x.register_hook([&log](const at::Tensor&) { log.Add("input grad"); });
      Loss(models[b.rank()]->forward(x)).backward();
      // Backward has returned: every bucket was launched, in order, and those
      // of fc3 and fc2 before backward reached the model's input (fc1's
      // gradients come with the input's, in an order LibTorch chooses).
      std::vector<std::string> events = log.events();
      events.erase(events.begin(), events.begin() + before);
      ASSERT_EQ(events.size(), 4u) << "step " << step;
      EXPECT_THAT(std::vector<std::string>(events.begin(), events.begin() + 2),
                  ElementsAre("allreduce bucket 0", "allreduce bucket 1"))
          << "step " << step;
      events.erase(events.begin(), events.begin() + 2);
      EXPECT_THAT(events, ::testing::UnorderedElementsAre("allreduce bucket 2",
                                                          "input grad"))
          << "step " << step;
      ASSERT_TRUE((*ddp)->SynchronizeGradients().ok());
      const StepStats& stats = (*ddp)->last_step_stats();
      EXPECT_EQ(stats.step, step);
      EXPECT_EQ(stats.num_buckets, 3);
      EXPECT_EQ(stats.buckets_launched_in_backward, 3);
      EXPECT_THAT(
          stats.bucket_bytes,
          ElementsAre(buckets[0].bytes, buckets[1].bytes, buckets[2].bytes));
      ASSERT_EQ(stats.bucket_launch_offsets.size(), 3u);
      EXPECT_TRUE(std::is_sorted(stats.bucket_launch_offsets.begin(),
                                 stats.bucket_launch_offsets.end()));
      EXPECT_EQ(stats.backward_until_last_launch,
                stats.bucket_launch_offsets.back());
      EXPECT_GE(stats.backward_until_last_gradient,
                stats.backward_until_last_launch);
      // Gloo times its collectives on its one worker thread: each bucket runs
      // after its launch and after the bucket before it.
      ASSERT_EQ(stats.bucket_start_offsets.size(), 3u);
      ASSERT_EQ(stats.bucket_finish_offsets.size(), 3u);
      for (size_t i = 0; i < 3; ++i) {
        EXPECT_GE(stats.bucket_start_offsets[i],
                  stats.bucket_launch_offsets[i]);
        EXPECT_GE(stats.bucket_finish_offsets[i],
                  stats.bucket_start_offsets[i]);
        if (i > 0) {
          EXPECT_GE(stats.bucket_start_offsets[i],
                    stats.bucket_finish_offsets[i - 1]);
        }
      }
      EXPECT_GE(stats.exposed_communication, absl::ZeroDuration());
      EXPECT_GE(stats.synchronize, stats.exposed_communication);
      EXPECT_GT(stats.hooks, absl::ZeroDuration());
      EXPECT_TRUE(stats.unused_parameters.empty());
      models[b.rank()]->zero_grad();
    }
  });
}

// Parameters that get no gradient contribute zeros: "unused" everywhere ends
// with zero gradients; "extra", used on rank 0 only, with rank 0's gradient
// divided by the world size.
TEST(DdpTest, UnusedParametersContributeZeros) {
  constexpr int kWorld = 2;
  MlpOptions mlp;
  mlp.with_extra = true;
  mlp.with_unused = true;
  auto models = MakeModels(kWorld, mlp);
  // Expected gradients, in registration order (fc1..fc3, extra, unused).
  const std::vector<at::Tensor> want =
      AverageLocalGradients(10, mlp, kWorld, [](int r) { return r == 0; });
  RunRanks(kWorld, Gloo(), [&](backend::Backend& b) {
    Mlp model = models[b.rank()];
    auto ddp = DistributedDataParallel::Create(model.ptr(), b);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    ASSERT_TRUE((*ddp)->PrepareForward().ok());
    Loss(model->forward(Input(b.rank()), /*use_extra=*/b.rank() == 0))
        .backward();
    absl::Status s = (*ddp)->SynchronizeGradients();
    ASSERT_TRUE(s.ok()) << s;
    ExpectGradientsNear(*model, want, 1e-6, absl::StrCat("rank ", b.rank()));
    EXPECT_EQ(model->unused->weight.grad().abs().max().item<float>(), 0.0f);
    const StepStats& stats = (*ddp)->last_step_stats();
    if (b.rank() == 0) {
      EXPECT_THAT(stats.unused_parameters,
                  ElementsAre("unused.bias", "unused.weight"));
    } else {
      EXPECT_THAT(stats.unused_parameters,
                  ElementsAre("unused.bias", "unused.weight", "extra.bias",
                              "extra.weight"));
    }
    // The bucket holding them launched only in SynchronizeGradients.
    EXPECT_EQ(stats.buckets_launched_in_backward, 0);
  });
}

TEST(DdpTest, UnusedParametersErrorNamesThemAndTheRanksOnEveryRank) {
  constexpr int kWorld = 3;
  MlpOptions mlp;
  mlp.with_extra = true;
  mlp.with_unused = true;
  auto models = MakeModels(kWorld, mlp);
  RunRanks(kWorld, Gloo(), [&](backend::Backend& b) {
    Mlp model = models[b.rank()];
    DdpOptions options;
    options.unused_parameters = UnusedParameters::kError;
    auto ddp = DistributedDataParallel::Create(model.ptr(), b, options);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    ASSERT_TRUE((*ddp)->PrepareForward().ok());
    Loss(model->forward(Input(b.rank()), /*use_extra=*/b.rank() != 1))
        .backward();
    absl::Status s = (*ddp)->SynchronizeGradients();
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    const std::string m(s.message());
    EXPECT_THAT(m, HasSubstr(absl::StrCat("[rank ", b.rank(),
                                          "] ddp: step 1: 4 parameters "
                                          "received no gradient: ")));
    EXPECT_THAT(m, HasSubstr("unused.bias (ranks 0-2), unused.weight (ranks "
                             "0-2), extra.bias (rank 1), extra.weight (rank "
                             "1)"));
    EXPECT_THAT(m, HasSubstr("UnusedParameters::kZero"));
    // A usage error, not a broken job: the ranks are still in step.
    model->zero_grad();
    ASSERT_TRUE((*ddp)->PrepareForward().ok());
    Loss(model->forward(Input(b.rank()), /*use_extra=*/true) +
         model->unused->forward(at::ones({1, 4})).sum())
        .backward();
    s = (*ddp)->SynchronizeGradients();
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_EQ((*ddp)->steps(), 2);
  });
}

TEST(DdpTest, DifferentModelsFailOnEveryRankNamingTheFirstMismatch) {
  constexpr int kWorld = 3;
  std::vector<Mlp> models;
  for (int r = 0; r < kWorld; ++r) {
    MlpOptions o;
    if (r == 1) o.hidden = 17;  // fc1.weight is the first to differ.
    models.emplace_back(o);
  }
  RunRanks(kWorld, Gloo(), [&](backend::Backend& b) {
    auto ddp = DistributedDataParallel::Create(models[b.rank()].ptr(), b);
    ASSERT_FALSE(ddp.ok());
    EXPECT_EQ(ddp.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(ddp.status().message(),
              absl::StrCat("[rank ", b.rank(),
                           "] ddp: the model differs across ranks at entry 1 "
                           "of 6: ranks 0, 2 have parameter fc1.weight [16, "
                           "8] float32; rank 1 has parameter fc1.weight [17, "
                           "8] float32 (parameters, then buffers, in "
                           "registration order; every rank must build the "
                           "same model)"));
  });
}

TEST(DdpTest, MissingParameterAndFrozenParameterAreMismatches) {
  constexpr int kWorld = 2;
  std::vector<Mlp> models;
  MlpOptions with_extra;
  with_extra.with_extra = true;
  models.emplace_back(with_extra);
  models.emplace_back(MlpOptions{});
  std::vector<Mlp> frozen = MakeModels(kWorld);
  frozen[1]->fc2->bias.set_requires_grad(false);
  RunRanks(kWorld, Gloo(), [&](backend::Backend& b) {
    auto ddp = DistributedDataParallel::Create(models[b.rank()].ptr(), b);
    ASSERT_FALSE(ddp.ok());
    EXPECT_THAT(std::string(ddp.status().message()),
                HasSubstr("entry 7 of 8: rank 0 has parameter extra.weight "
                          "[4, 4] float32; rank 1 has nothing there (6 entries "
                          "in all)"));
    ddp = DistributedDataParallel::Create(frozen[b.rank()].ptr(), b);
    ASSERT_FALSE(ddp.ok());
    EXPECT_THAT(std::string(ddp.status().message()),
                HasSubstr("rank 1 has parameter fc2.bias [16] float32 "
                          "(frozen)"));
  });
}

// A model with a batch norm, for buffers: running_mean/var and
// num_batches_tracked.
struct NormNetImpl : torch::nn::Module {
  NormNetImpl() {
    fc = register_module("fc", torch::nn::Linear(8, 4));
    bn = register_module("bn", torch::nn::BatchNorm1d(4));
  }
  at::Tensor forward(const at::Tensor& x) { return bn(fc(x)); }
  torch::nn::Linear fc{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
};
TORCH_MODULE(NormNet);

TEST(DdpTest, ParametersAndBuffersComeFromRank0) {
  constexpr int kWorld = 3;
  std::vector<NormNet> models;
  for (int r = 0; r < kWorld; ++r) {
    torch::manual_seed(r);
    models.emplace_back();
    at::NoGradGuard no_grad;
    models.back()->bn->running_mean.fill_(r);
  }
  torch::manual_seed(0);
  NormNet rank0;
  RunRanks(kWorld, Gloo(), [&](backend::Backend& inner) {
    EventLog log;
    RecordingBackend b(inner, &log);
    NormNet model = models[b.rank()];
    auto ddp = DistributedDataParallel::Create(model.ptr(), b);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    EXPECT_EQ(testing::MaxParameterDifference(*model, *rank0), 0.0);

    // Training forwards change the running statistics differently per rank;
    // PrepareForward puts rank 0's back.
    auto broadcasts = [&] {
      const auto events = log.events();
      return std::count_if(events.begin(), events.end(), [](const auto& e) {
        return absl::StartsWith(e, "allreduce ddp broadcast of buffers");
      });
    };
    auto forward = [&] {
      ASSERT_TRUE((*ddp)->PrepareForward().ok());
      (void)model->forward(Input(b.rank()));
    };
    auto running_mean_is_rank0s = [&] {
      std::vector<at::Tensor> all;
      for (int r = 0; r < kWorld; ++r) all.push_back(at::zeros({4}));
      EXPECT_TRUE(b.AllGather(all, model->bn->running_mean.clone())
                      ->Wait(testing::kTestTimeout)
                      .ok());
      bool same = true;
      for (const at::Tensor& t : all) same = same && t.equal(all[0]);
      return same;
    };
    const auto start = broadcasts();
    forward();  // Broadcast, then the forward makes the stats differ.
    EXPECT_EQ(broadcasts() - start, 2);  // float32 and int64 buffers.
    EXPECT_FALSE(running_mean_is_rank0s());
    ASSERT_TRUE((*ddp)->PrepareForward().ok());
    EXPECT_TRUE(running_mean_is_rank0s());
    EXPECT_EQ(broadcasts() - start, 4);

    // PyTorch's rule: a forward that will not synchronise (no_sync, or grad
    // mode off) skips the buffer broadcast before the next forward.
    {
      auto no_sync = (*ddp)->NoSync();
      forward();  // Broadcasts: the previous one was synchronised.
      forward();  // Does not.
    }
    EXPECT_EQ(broadcasts() - start, 6);
    forward();  // Does not: the previous forward was under no_sync.
    EXPECT_EQ(broadcasts() - start, 6);
    forward();  // Does.
    EXPECT_EQ(broadcasts() - start, 8);
    {
      at::NoGradGuard no_grad;
      forward();  // Does (the previous one was synchronised).
      forward();  // Does not.
    }
    EXPECT_EQ(broadcasts() - start, 10);
  });
}

// init_sync=false (every rank holds rank 0's values already, as after a
// resume): no broadcast at construction, each rank keeps its values; the
// check that the ranks have the same model still runs.
TEST(DdpTest, NoInitSyncKeepsEachRanksValuesButStillChecksTheModel) {
  constexpr int kWorld = 2;
  std::vector<NormNet> models;
  for (int r = 0; r < kWorld; ++r) {
    torch::manual_seed(r);
    models.emplace_back();
  }
  DdpOptions options;
  options.init_sync = false;
  RunRanks(kWorld, Gloo(), [&](backend::Backend& inner) {
    EventLog log;
    RecordingBackend b(inner, &log);
    NormNet model = models[b.rank()];
    const at::Tensor before = model->fc->weight.clone();
    auto ddp = DistributedDataParallel::Create(model.ptr(), b, options);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    EXPECT_TRUE(model->fc->weight.equal(before));
    for (const std::string& e : log.events())
      EXPECT_FALSE(absl::StrContains(e, "parameters and buffers")) << e;
  });
  // A model that differs in shape is still refused.
  RunRanks(kWorld, Gloo(), [&](backend::Backend& b) {
    auto model = b.rank() == 0 ? std::make_shared<torch::nn::LinearImpl>(8, 4)
                               : std::make_shared<torch::nn::LinearImpl>(8, 5);
    auto ddp = DistributedDataParallel::Create(model, b, options);
    EXPECT_EQ(ddp.status().code(), absl::StatusCode::kInvalidArgument)
        << ddp.status();
  });
}

TEST(DdpTest, BuffersStayLocalWithoutBroadcastBuffers) {
  constexpr int kWorld = 2;
  std::vector<NormNet> models;
  for (int r = 0; r < kWorld; ++r) models.emplace_back();
  RunRanks(kWorld, Gloo(), [&](backend::Backend& b) {
    NormNet model = models[b.rank()];
    DdpOptions options;
    options.broadcast_buffers = false;
    auto ddp = DistributedDataParallel::Create(model.ptr(), b, options);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    {
      at::NoGradGuard no_grad;
      model->bn->running_mean.fill_(b.rank());
    }
    ASSERT_TRUE((*ddp)->PrepareForward().ok());
    EXPECT_EQ(model->bn->running_mean[0].item<float>(), b.rank());
  });
}

// Gradients travel as float16 divided by the world size first: close to the
// float32 result, and half the bytes on the wire. On shm the float16 copies
// are the shared buffers (zero-copy allreduces).
TEST(DdpTest, Fp16CompressionIsCloseToFloat32) {
  constexpr int kWorld = 2;
  const std::vector<at::Tensor> want = AverageLocalGradients(10, {}, kWorld);
  for (bool shm : {false, true}) {
    auto models = MakeModels(kWorld);
    RunRanks(kWorld, shm ? Shm() : Gloo(), [&](backend::Backend& b) {
      Mlp model = models[b.rank()];
      DdpOptions options;
      options.first_bucket_cap_bytes = 300;
      auto ddp = DistributedDataParallel::Create(model.ptr(), b, options);
      ASSERT_TRUE(ddp.ok()) << ddp.status();
      ASSERT_TRUE((*ddp)->RegisterCommHook(hooks::Fp16CompressHook()).ok());
      for (const BucketInfo& bucket : (*ddp)->buckets())
        EXPECT_EQ(bucket.communicated_bytes * 2, bucket.bytes);
      ASSERT_TRUE((*ddp)->PrepareForward().ok());
      Loss(model->forward(Input(b.rank()))).backward();
      ASSERT_TRUE((*ddp)->SynchronizeGradients().ok());
      // float16 keeps 11 significant bits: relative error about 1e-3.
      double scale = 0;
      for (const at::Tensor& g : want)
        scale = std::max(scale, g.abs().max().item<double>());
      ExpectGradientsNear(*model, want, 2e-3 * scale, "fp16");
      const at::Tensor exact = want[0];
      EXPECT_FALSE(model->fc1->weight.grad().equal(exact))
          << "suspiciously exact for float16";
      EXPECT_EQ(backend::ShmZeroCopyCollectivesForTesting(b),
                shm ? static_cast<int64_t>((*ddp)->buckets().size()) : -1);
    });
  }
}

// A collective that fails comes back from SynchronizeGradients as a Status
// naming the rank, step, bucket, size and parameters; later calls return the
// same error at once.
TEST(DdpTest, FailedBucketAllReduceIsAStatusAndSticky) {
  constexpr int kWorld = 2;
  auto models = MakeModels(kWorld);
  RunRanks(kWorld, Gloo(), [&](backend::Backend& inner) {
    EventLog log;
    RecordingBackend b(inner, &log, "bucket 1");
    DdpOptions options;
    options.first_bucket_cap_bytes = 300;
    options.bucket_cap_bytes = 600;
    auto ddp =
        DistributedDataParallel::Create(models[b.rank()].ptr(), b, options);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    ASSERT_TRUE((*ddp)->PrepareForward().ok());
    Loss(models[b.rank()]->forward(Input(b.rank()))).backward();
    absl::Status s = (*ddp)->SynchronizeGradients();
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    EXPECT_THAT(std::string(s.message()),
                HasSubstr(absl::StrCat(
                    "[rank ", b.rank(),
                    "] ddp: step 1, bucket 1 (1 KiB, 1 parameter fc2.weight) "
                    "allreduce failed after ")));
    EXPECT_THAT(std::string(s.message()),
                HasSubstr(absl::StrCat(": [rank ", b.rank(),
                                       "] injected failure (bucket 1)")));
    EXPECT_EQ((*ddp)->SynchronizeGradients(), s);
    EXPECT_EQ((*ddp)->PrepareForward(), s);
  });
}

// A rank that stops taking part: the others' SynchronizeGradients fails within
// the backend's timeout, naming the bucket, instead of hanging.
TEST(DdpTest, SilentPeerFailsWithinTheTimeout) {
  constexpr int kWorld = 2;
  auto models = MakeModels(kWorld);
  backend::testing::Notification rank0_done;
  RunRanks(kWorld, Gloo(absl::Seconds(1)), [&](backend::Backend& b) {
    auto ddp = DistributedDataParallel::Create(models[b.rank()].ptr(), b);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    if (b.rank() == 1) {
      rank0_done.WaitForNotificationWithTimeout(absl::Seconds(60));
      return;
    }
    const absl::Time start = absl::Now();
    ASSERT_TRUE((*ddp)->PrepareForward().ok());
    Loss(models[0]->forward(Input(0))).backward();
    absl::Status s = (*ddp)->SynchronizeGradients();
    EXPECT_FALSE(s.ok());
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("[rank 0] ddp: step 1, bucket 0 ("));
    EXPECT_THAT(std::string(s.message()), HasSubstr("gloo allreduce"));
    EXPECT_LT(absl::Now() - start, absl::Seconds(30));
    rank0_done.Notify();
  });
}

// DdpOptions::timeout bounds the wait even when the backend's is longer.
TEST(DdpTest, OwnTimeoutBoundsTheWait) {
  constexpr int kWorld = 2;
  auto models = MakeModels(kWorld);
  backend::testing::Notification rank0_done;
  RunRanks(kWorld, Gloo(absl::Seconds(3)), [&](backend::Backend& b) {
    DdpOptions options;
    options.timeout = absl::Milliseconds(200);
    auto ddp =
        DistributedDataParallel::Create(models[b.rank()].ptr(), b, options);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    if (b.rank() == 1) {
      rank0_done.WaitForNotificationWithTimeout(absl::Seconds(60));
      return;
    }
    Loss(models[0]->forward(Input(0))).backward();
    absl::Status s = (*ddp)->SynchronizeGradients();
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("allreduce did not finish within"));
    EXPECT_THAT(std::string(s.message()), HasSubstr("DdpOptions::timeout"));
    rank0_done.Notify();
  });
}

// Misuse that leaves the ranks in step is a FailedPrecondition; NoSync makes
// SynchronizeGradients a no-op; destroying the wrapper removes its hooks.
TEST(DdpTest, UsageErrorsNoSyncAndHookRemoval) {
  auto models = MakeModels(1);
  Mlp model = models[0];
  RunRanks(1, Gloo(), [&](backend::Backend& b) {
    auto ddp = DistributedDataParallel::Create(model.ptr(), b);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    ASSERT_TRUE((*ddp)->PrepareForward().ok());
    Loss(model->forward(Input(0))).backward();
    absl::Status s = (*ddp)->PrepareForward();
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("call SynchronizeGradients after each backward"));
    // A second backward before synchronising.
    Loss(model->forward(Input(0))).backward();
    s = (*ddp)->SynchronizeGradients();
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("received a gradient more than once"));
    EXPECT_THAT(std::string(s.message()), HasSubstr("fc3.bias"));

    // Inside NoSync, SynchronizeGradients does nothing and the hooks stay out
    // of the way: .grad accumulates as without DDP.
    model->zero_grad();
    {
      auto no_sync = (*ddp)->NoSync();
      EXPECT_FALSE((*ddp)->gradient_sync());
      Loss(model->forward(Input(0))).backward();
      Loss(model->forward(Input(0))).backward();
      EXPECT_TRUE((*ddp)->SynchronizeGradients().ok());
      EXPECT_EQ((*ddp)->steps(), 1);
    }
    EXPECT_TRUE((*ddp)->gradient_sync());
    const at::Tensor twice = model->fc1->weight.grad().clone();
    // Backward outside NoSync without a PrepareForward still synchronises.
    model->zero_grad();
    Loss(model->forward(Input(0))).backward();
    ASSERT_TRUE((*ddp)->SynchronizeGradients().ok());
    EXPECT_TRUE(model->fc1->weight.grad().mul(2).allclose(twice));
  });
  // Without the wrapper the hooks are gone: backward works on its own.
  model->zero_grad();
  Loss(model->forward(Input(0))).backward();
  EXPECT_TRUE(model->fc1->weight.grad().defined());
}

TEST(DdpTest, RejectsBadArguments) {
  RunRanks(1, Gloo(), [&](backend::Backend& b) {
    auto ddp = DistributedDataParallel::Create(nullptr, b);
    EXPECT_EQ(ddp.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(ddp.status().message()),
                HasSubstr("[rank 0] ddp: module is null"));
    DdpOptions options;
    options.bucket_cap_bytes = 0;
    ddp = DistributedDataParallel::Create(Mlp().ptr(), b, options);
    EXPECT_EQ(ddp.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(ddp.status().message()),
                HasSubstr("bucket_cap_bytes = 0"));
  });
}

}  // namespace
}  // namespace dtrain::ddp
