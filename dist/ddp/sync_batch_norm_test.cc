// SyncBatchNorm on ranks as threads (Gloo on 127.0.0.1), each with a slice of
// a global batch, against one torch::nn::BatchNorm2d on the whole batch:
// outputs, input gradients, weight and bias gradients (summed over ranks, as
// DDP's allreduce does) and running statistics, over several steps; equal
// and unequal slices, an empty slice, momentum unset; a conv + norm + relu
// net built through the norm_layer factory; eval without collectives; and
// failures that name the collective.

#include "dist/ddp/sync_batch_norm.h"

#include <ATen/ATen.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "dist/backend/backend.h"
#include "dist/backend/backend_testing.h"
#include "dist/ddp/ddp_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/norm_layer.h"

namespace dtrain::ddp {
namespace {

using testing::EventLog;
using testing::Gloo;
using ::testing::HasSubstr;
using testing::RecordingBackend;

constexpr double kTolerance = 1e-5;
constexpr int64_t kChannels = 4;
constexpr int kSteps = 3;

double MaxDiff(const at::Tensor& a, const at::Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  if (a.numel() == 0) return 0;
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

// MaxDiff relative to the expected values' scale (at least 1): sums over
// many elements, such as a convolution's weight gradient, are large.
double ScaledDiff(const at::Tensor& actual, const at::Tensor& expected) {
  const double scale = expected.numel() == 0
                           ? 1.0
                           : std::max(1.0, expected.abs().max().item<double>());
  return MaxDiff(actual, expected) / scale;
}

// What one step produced on one rank, or in the reference.
struct StepResult {
  at::Tensor output;
  at::Tensor input_grad;
  std::vector<at::Tensor> parameter_grads;  // in registration order
  std::vector<at::Tensor> buffers;          // in registration order
};

struct StepData {
  at::Tensor input;         // [global batch, C, H, W]
  at::Tensor loss_weights;  // like the output
};

std::vector<StepData> MakeData(int64_t global_batch, int64_t channels,
                               int64_t side) {
  torch::manual_seed(2024);
  std::vector<StepData> data;
  for (int s = 0; s < kSteps; ++s) {
    // An offset and a scale per channel, so that means and variances differ.
    const at::Tensor x = at::randn({global_batch, channels, side, side}) * 2.5 +
                         at::arange(channels, at::kFloat).view({1, -1, 1, 1});
    data.push_back({x, at::randn({global_batch, channels, side, side})});
  }
  return data;
}

// One step: forward of `module` on `input`, loss sum(out * w), backward.
template <typename Forward>
StepResult RunStep(torch::nn::Module& module, const Forward& forward,
                   const at::Tensor& input, const at::Tensor& loss_weights) {
  for (at::Tensor& p : module.parameters()) p.mutable_grad() = at::Tensor();
  at::Tensor x = input.clone().requires_grad_(true);
  at::Tensor out = forward(x);
  (out * loss_weights).sum().backward();
  StepResult r;
  r.output = out.detach().clone();
  r.input_grad = x.grad().defined() ? x.grad().clone() : at::zeros_like(x);
  for (const at::Tensor& p : module.parameters()) {
    r.parameter_grads.push_back(p.grad().defined() ? p.grad().clone()
                                                   : at::zeros_like(p));
  }
  for (const at::Tensor& b : module.buffers()) r.buffers.push_back(b.clone());
  return r;
}

// Compares the ranks' steps with the reference's (ScaledDiff); returns the
// largest difference seen.
double Compare(const std::vector<std::vector<StepResult>>& ranks,
               const std::vector<StepResult>& reference,
               const std::vector<int64_t>& sizes) {
  double worst = 0;
  for (size_t s = 0; s < reference.size(); ++s) {
    std::vector<at::Tensor> outputs, input_grads;
    for (size_t r = 0; r < ranks.size(); ++r) {
      outputs.push_back(ranks[r][s].output);
      input_grads.push_back(ranks[r][s].input_grad);
    }
    const double out = ScaledDiff(at::cat(outputs), reference[s].output);
    const double in = ScaledDiff(at::cat(input_grads), reference[s].input_grad);
    double params = 0;
    for (size_t p = 0; p < reference[s].parameter_grads.size(); ++p) {
      at::Tensor sum = at::zeros_like(reference[s].parameter_grads[p]);
      for (const auto& rank : ranks) sum += rank[s].parameter_grads[p];
      params =
          std::max(params, ScaledDiff(sum, reference[s].parameter_grads[p]));
    }
    double buffers = 0;
    for (size_t r = 0; r < ranks.size(); ++r) {
      EXPECT_EQ(ranks[r][s].buffers.size(), reference[s].buffers.size());
      for (size_t b = 0; b < reference[s].buffers.size(); ++b) {
        buffers = std::max(buffers, ScaledDiff(ranks[r][s].buffers[b],
                                               reference[s].buffers[b]));
      }
    }
    EXPECT_LE(out, kTolerance) << "step " << s << " output";
    EXPECT_LE(in, kTolerance) << "step " << s << " input gradient";
    EXPECT_LE(params, kTolerance) << "step " << s << " parameter gradients";
    EXPECT_LE(buffers, kTolerance) << "step " << s << " running statistics";
    std::cout << "slices " << absl::StrJoin(sizes, ",") << " step " << s
              << ": max |diff| / max(1, max |expected|): output " << out
              << ", input grad " << in << ", parameter grads " << params
              << ", running stats " << buffers << "\n";
    worst = std::max({worst, out, in, params, buffers});
  }
  return worst;
}

struct Case {
  std::vector<int64_t> sizes;  // per rank
  bool momentum = true;        // false: momentum unset (cumulative average)
};

class SyncBatchNormEquivalenceTest : public ::testing::TestWithParam<Case> {};

TEST_P(SyncBatchNormEquivalenceTest, RanksMatchOneBatchNormOnTheGlobalBatch) {
  const Case& c = GetParam();
  const int world = static_cast<int>(c.sizes.size());
  const int64_t global = std::accumulate(c.sizes.begin(), c.sizes.end(), 0);
  const std::vector<StepData> data = MakeData(global, kChannels, 3);
  torch::manual_seed(5);
  const at::Tensor weight = at::rand({kChannels}) + 0.5;
  const at::Tensor bias = at::randn({kChannels});

  torch::nn::BatchNorm2dOptions bn_options(kChannels);
  SyncBatchNormOptions sync_options(kChannels);
  if (!c.momentum) {
    bn_options.momentum(c10::nullopt);
    sync_options.momentum = absl::nullopt;
  }
  torch::nn::BatchNorm2d reference(bn_options);
  {
    at::NoGradGuard no_grad;
    reference->weight.copy_(weight);
    reference->bias.copy_(bias);
  }
  std::vector<StepResult> expected;
  for (const StepData& d : data) {
    expected.push_back(RunStep(
        *reference, [&](const at::Tensor& x) { return reference(x); }, d.input,
        d.loss_weights));
  }
  reference->eval();
  const at::Tensor eval_input = data[0].input * 0.5 + 1;
  const at::Tensor expected_eval = reference(eval_input).detach();

  std::vector<std::vector<StepResult>> results(world);
  std::vector<EventLog> logs(world);
  std::vector<at::Tensor> eval_outputs(world);
  backend::testing::RunRanks(world, Gloo(), [&](backend::Backend& b) {
    const int r = b.rank();
    RecordingBackend recording(b, &logs[r]);
    SyncBatchNorm bn(sync_options, &recording);
    bn->set_label("bn");
    {
      at::NoGradGuard no_grad;
      bn->weight.copy_(weight);
      bn->bias.copy_(bias);
    }
    const int64_t offset =
        std::accumulate(c.sizes.begin(), c.sizes.begin() + r, int64_t{0});
    for (const StepData& d : data) {
      results[r].push_back(RunStep(
          *bn, [&](const at::Tensor& x) { return bn(x); },
          d.input.narrow(0, offset, c.sizes[r]),
          d.loss_weights.narrow(0, offset, c.sizes[r])));
    }
    // One allreduce in forward and one in backward per step, in that order.
    std::vector<std::string> expected_events;
    for (int s = 0; s < kSteps; ++s) {
      expected_events.push_back("allreduce sync_batch_norm bn forward");
      expected_events.push_back("allreduce sync_batch_norm bn backward");
    }
    EXPECT_EQ(logs[r].events(), expected_events);
    // Eval: the running statistics, no collectives.
    logs[r].Clear();
    bn->eval();
    eval_outputs[r] =
        bn(eval_input.narrow(0, offset, c.sizes[r])).detach().clone();
    EXPECT_TRUE(logs[r].events().empty());
    EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), kSteps);
  });
  Compare(results, expected, c.sizes);
  const double eval = ScaledDiff(at::cat(eval_outputs), expected_eval);
  std::cout << "eval: scaled max |diff| " << eval << "\n";
  EXPECT_LE(eval, kTolerance);
}

INSTANTIATE_TEST_SUITE_P(Slices, SyncBatchNormEquivalenceTest,
                         ::testing::Values(Case{{4, 4}}, Case{{3, 5}},
                                           Case{{2, 2, 2}}, Case{{3, 1, 4}},
                                           Case{{3, 0, 2}},
                                           Case{{3, 5}, /*momentum=*/false}),
                         [](const auto& info) {
                           return absl::StrCat(
                               "slices_", absl::StrJoin(info.param.sizes, "_"),
                               info.param.momentum ? "" : "_cumulative");
                         });

// conv3x3 -> norm -> relu, the norm from a norm_layer factory.
class ConvNormReluImpl : public torch::nn::Module {
 public:
  explicit ConvNormReluImpl(const models::NormLayerFactory& norm_layer) {
    conv = register_module(
        "conv", torch::nn::Conv2d(
                    torch::nn::Conv2dOptions(3, kChannels, 3).padding(1)));
    norm = norm_layer(kChannels);
    register_module("norm", norm.ptr());
  }
  at::Tensor forward(const at::Tensor& x) {
    return norm.forward<at::Tensor>(conv(x)).relu();
  }
  torch::nn::Conv2d conv{nullptr};
  torch::nn::AnyModule norm;
};
TORCH_MODULE(ConvNormRelu);

TEST(SyncBatchNormTest, ConvNormReluNetMatchesOneProcess) {
  for (const std::vector<int64_t>& sizes :
       {std::vector<int64_t>{3, 5}, std::vector<int64_t>{2, 3, 2}}) {
    const int world = static_cast<int>(sizes.size());
    const int64_t global = std::accumulate(sizes.begin(), sizes.end(), 0);
    const std::vector<StepData> data = MakeData(global, 3, 5);
    std::vector<StepData> losses = MakeData(global, kChannels, 5);
    torch::manual_seed(11);
    ConvNormRelu reference(models::BatchNorm2dLayers());
    std::vector<StepResult> expected;
    for (int s = 0; s < kSteps; ++s) {
      expected.push_back(RunStep(
          *reference, [&](const at::Tensor& x) { return reference(x); },
          data[s].input, losses[s].loss_weights));
    }
    std::vector<std::vector<StepResult>> results(world);
    backend::testing::RunRanks(world, Gloo(), [&](backend::Backend& b) {
      const int r = b.rank();
      ConvNormRelu net(SyncBatchNormLayers(b));
      EXPECT_EQ(LabelSyncBatchNorms(*net), 1);
      EXPECT_EQ(net->norm.get<SyncBatchNorm>()->label(), "norm");
      {
        at::NoGradGuard no_grad;
        const auto from = reference->named_parameters();
        for (auto& p : net->named_parameters()) p.value().copy_(from[p.key()]);
      }
      const int64_t offset =
          std::accumulate(sizes.begin(), sizes.begin() + r, int64_t{0});
      for (int s = 0; s < kSteps; ++s) {
        results[r].push_back(RunStep(
            *net, [&](const at::Tensor& x) { return net(x); },
            data[s].input.narrow(0, offset, sizes[r]),
            losses[s].loss_weights.narrow(0, offset, sizes[r])));
      }
    });
    Compare(results, expected, sizes);
  }
}

TEST(SyncBatchNormTest, NamesAndInitialValuesEqualBatchNorm2d) {
  SyncBatchNorm sync(SyncBatchNormOptions(6));
  torch::nn::BatchNorm2d bn(6);
  std::vector<std::string> sync_names, bn_names;
  for (const auto& item : sync->named_parameters()) {
    sync_names.push_back(item.key());
    EXPECT_EQ(MaxDiff(item.value(), bn->named_parameters()[item.key()]), 0);
  }
  for (const auto& item : bn->named_parameters())
    bn_names.push_back(item.key());
  EXPECT_EQ(sync_names, bn_names);
  sync_names.clear();
  bn_names.clear();
  for (const auto& item : sync->named_buffers()) {
    sync_names.push_back(item.key());
    EXPECT_EQ(item.value().scalar_type(),
              bn->named_buffers()[item.key()].scalar_type());
    EXPECT_EQ(MaxDiff(item.value(), bn->named_buffers()[item.key()]), 0);
  }
  for (const auto& item : bn->named_buffers()) bn_names.push_back(item.key());
  EXPECT_EQ(sync_names, bn_names);
  EXPECT_THAT(sync_names, ::testing::ElementsAre("running_mean", "running_var",
                                                 "num_batches_tracked"));
}

TEST(SyncBatchNormTest, WithoutABackendItIsBatchNorm) {
  torch::manual_seed(3);
  const at::Tensor x = at::randn({5, 6, 4, 4}) * 3 + 1;
  SyncBatchNorm sync(SyncBatchNormOptions(6));
  torch::nn::BatchNorm2d bn(6);
  EXPECT_EQ(MaxDiff(sync(x), bn(x)), 0);
  EXPECT_EQ(MaxDiff(sync->running_mean, bn->running_mean), 0);
  EXPECT_EQ(MaxDiff(sync->running_var, bn->running_var), 0);
  EXPECT_EQ(sync->num_batches_tracked.item<int64_t>(), 1);
  sync->eval();
  bn->eval();
  EXPECT_EQ(MaxDiff(sync(x), bn(x)), 0);
}

TEST(SyncBatchNormTest, WrongChannelCountIsAnErrorBeforeAnyCollective) {
  EventLog log;
  backend::testing::RunRanks(1, Gloo(), [&](backend::Backend& b) {
    RecordingBackend recording(b, &log);
    SyncBatchNorm bn(SyncBatchNormOptions(4), &recording);
    try {
      bn(at::zeros({2, 3, 2, 2}));
      ADD_FAILURE() << "no exception";
    } catch (const c10::Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("expected 4 channels"));
    }
  });
  EXPECT_TRUE(log.events().empty());
}

TEST(SyncBatchNormTest, OneValuePerChannelOverAllRanksIsAnError) {
  backend::testing::RunRanks(2, Gloo(), [&](backend::Backend& b) {
    SyncBatchNorm bn(SyncBatchNormOptions(2), &b);
    // Rank 0 has one value per channel and rank 1 none: a global count of 1.
    const at::Tensor x = at::ones({b.rank() == 0 ? 1 : 0, 2});
    try {
      bn(x);
      ADD_FAILURE() << "no exception on rank " << b.rank();
    } catch (const c10::Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("expected more than 1 value per channel"))
          << "rank " << b.rank();
    }
  });
}

// A rank that never joins the forward's allreduce, staying connected or
// gone (its backend destroyed, as when its process dies): the other fails
// within the backend's timeout with an error that names the layer and the
// collective.
class SyncBatchNormPeerTest : public ::testing::TestWithParam<bool> {};

TEST_P(SyncBatchNormPeerTest, ARankThatDoesNotJoinFailsTheForwardInTime) {
  const bool peer_gone = GetParam();
  constexpr absl::Duration kTimeout = absl::Seconds(2);
  backend::testing::Notification done;
  std::string message;
  absl::Duration elapsed;
  backend::testing::RunRanks(2, Gloo(kTimeout), [&](backend::Backend& b) {
    if (b.rank() == 1) {
      // Never calls forward; leaving destroys its backend.
      if (!peer_gone) done.WaitForNotificationWithTimeout(absl::Seconds(60));
      return;
    }
    SyncBatchNorm bn(SyncBatchNormOptions(3), &b);
    bn->set_label("layer1.0.bn1");
    const absl::Time start = absl::Now();
    try {
      bn(at::randn({4, 3, 2, 2}));
      ADD_FAILURE() << "no exception";
    } catch (const c10::Error& e) {
      message = e.what();
    }
    elapsed = absl::Now() - start;
    done.Notify();
  });
  std::cout << (peer_gone ? "peer gone" : "peer silent") << ": error after "
            << elapsed << ": " << message.substr(0, message.find('\n')) << "\n";
  EXPECT_THAT(message, HasSubstr("[rank 0]"));
  EXPECT_THAT(message, HasSubstr("sync_batch_norm layer1.0.bn1: forward "
                                 "statistics allreduce (7 x float64)"));
  if (!peer_gone) {
    EXPECT_GE(elapsed, kTimeout - absl::Milliseconds(100));
  }
  EXPECT_LT(elapsed, kTimeout + absl::Seconds(5));
}

INSTANTIATE_TEST_SUITE_P(Peers, SyncBatchNormPeerTest, ::testing::Bool(),
                         [](const auto& info) {
                           return info.param ? "gone" : "silent";
                         });

// A collective that fails in backward (injected on every rank) comes out of
// Tensor::backward as an exception naming it.
TEST(SyncBatchNormTest, ABackwardFailureComesOutOfBackward) {
  std::vector<EventLog> logs(2);
  backend::testing::RunRanks(2, Gloo(), [&](backend::Backend& b) {
    RecordingBackend recording(b, &logs[b.rank()],
                               "sync_batch_norm bn backward");
    SyncBatchNorm bn(SyncBatchNormOptions(3), &recording);
    bn->set_label("bn");
    at::Tensor x = at::randn({4, 3, 2, 2}).requires_grad_(true);
    at::Tensor loss = (bn(x) * at::randn({4, 3, 2, 2})).sum();
    try {
      loss.backward();
      ADD_FAILURE() << "no exception";
    } catch (const std::exception& e) {
      EXPECT_THAT(e.what(), HasSubstr("sync_batch_norm bn: backward statistics "
                                      "allreduce (7 x float64) failed"));
      EXPECT_THAT(e.what(), HasSubstr("injected failure"));
    }
  });
}

}  // namespace
}  // namespace dtrain::ddp
