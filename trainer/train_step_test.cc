// TrainStep with ranks as threads (Gloo over an in-memory store): gradient
// accumulation equals one step on the whole batch, clipping bounds the
// update, autocast trains, and misuse is refused.
#include "trainer/train_step.h"

#include <ATen/Functions.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "dist/backend/backend_testing.h"
#include "dist/ddp/ddp.h"
#include "gtest/gtest.h"
#include "models/model.h"
#include "trainer/trainer_testing.h"

namespace dtrain::trainer {
namespace {

using testing::Gloo;

// Two layers, no dropout or batch norm: a batch's gradient is the mean of its
// examples' gradients, whatever way the batch is split.
class SmallNet : public models::Model {
 public:
  SmallNet() : Model("SmallNet") {
    fc1_ = register_module("fc1", torch::nn::Linear(6, 5));
    fc2_ = register_module("fc2", torch::nn::Linear(5, 3));
  }
  torch::Tensor Forward(const torch::Tensor& x, models::LayerTrace*) override {
    return fc2_->forward(at::tanh(fc1_->forward(x)));
  }

 private:
  torch::nn::Linear fc1_{nullptr};
  torch::nn::Linear fc2_{nullptr};
};

constexpr int kRanks = 2;
constexpr int64_t kExamples = 12;  // per rank

at::Tensor Inputs(int rank) {
  return at::linspace(-1, 1, kExamples * 6).reshape({kExamples, 6}) *
         (rank + 1) * 0.7;
}
at::Tensor Labels(int rank) {
  return at::arange(kExamples, at::kLong).add(rank).remainder(3);
}

// Trains one step on each rank with the first `examples` examples split in
// micro-batches of `micro` examples; returns rank 0's parameters (the ranks
// are identical after DDP).
std::vector<at::Tensor> OneStep(const StepOptions& options, int64_t micro,
                                int64_t examples,
                                std::vector<StepOutcome>* outcomes = nullptr) {
  std::vector<at::Tensor> result;
  std::mutex mu;
  backend::testing::RunRanks(kRanks, Gloo, [&](backend::Backend& b) {
    std::shared_ptr<SmallNet> model;
    {
      // One global generator for all the threads.
      std::lock_guard<std::mutex> lock(mu);
      torch::manual_seed(7);
      model = std::make_shared<SmallNet>();
    }
    auto ddp = ddp::DistributedDataParallel::Create(model, b);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.5));
    TrainStep step(options, *model, **ddp, sgd, c10::Device(c10::kCPU));
    const int64_t k = (examples + micro - 1) / micro;
    ASSERT_TRUE(step.Begin(k).ok());
    const at::Tensor x = Inputs(b.rank());
    const at::Tensor y = Labels(b.rank());
    for (int64_t j = 0; j < k; ++j) {
      const int64_t end = std::min(examples, (j + 1) * micro);
      absl::Status s = step.MicroBatch(x.slice(0, j * micro, end),
                                       y.slice(0, j * micro, end));
      ASSERT_TRUE(s.ok()) << s;
    }
    absl::StatusOr<StepOutcome> outcome = step.Finish();
    ASSERT_TRUE(outcome.ok()) << outcome.status();
    std::lock_guard<std::mutex> lock(mu);
    if (outcomes != nullptr) outcomes->push_back(*outcome);
    if (b.rank() == 0) {
      for (const at::Tensor& p : model->parameters())
        result.push_back(p.detach().clone());
    }
  });
  return result;
}

void ExpectClose(const std::vector<at::Tensor>& a,
                 const std::vector<at::Tensor>& b, double tolerance) {
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  for (size_t i = 0; i < a.size(); ++i) {
    const double diff = (a[i] - b[i]).abs().max().item<double>();
    EXPECT_LE(diff, tolerance) << "parameter " << i;
  }
}

TEST(TrainStepTest, AccumulatingFourMicroBatchesEqualsOneBatchFourTimesAsBig) {
  StepOptions whole;
  StepOptions accumulate;
  accumulate.accumulate_steps = 4;
  std::vector<StepOutcome> outcomes;
  const std::vector<at::Tensor> once = OneStep(whole, kExamples, kExamples);
  const std::vector<at::Tensor> four =
      OneStep(accumulate, kExamples / 4, kExamples, &outcomes);
  ExpectClose(once, four, 1e-6);
  ASSERT_EQ(outcomes.size(), 2u);
  EXPECT_EQ(outcomes[0].examples, kExamples);
  // And the update is not nothing.
  torch::manual_seed(7);
  SmallNet fresh;
  EXPECT_GT((fresh.parameters()[0] - once[0]).abs().max().item<double>(), 1e-3);
}

TEST(TrainStepTest, AShortLastStepAveragesOverTheMicroBatchesItHas) {
  // Three micro-batches of 3 in a step of up to 4: the mean over 9 examples.
  StepOptions whole;
  StepOptions accumulate;
  accumulate.accumulate_steps = 4;
  ExpectClose(OneStep(whole, 9, 9), OneStep(accumulate, 3, 9), 1e-6);
}

TEST(TrainStepTest, ClippingBoundsTheUpdateAndReportsTheNorm) {
  StepOptions plain;
  StepOptions clipped;
  clipped.clip_grad_norm = 1e-3;
  std::vector<StepOutcome> outcomes;
  torch::manual_seed(7);
  SmallNet fresh;
  const std::vector<at::Tensor> start = fresh.parameters();
  const std::vector<at::Tensor> after =
      OneStep(clipped, kExamples, kExamples, &outcomes);
  double squares = 0;
  for (size_t i = 0; i < after.size(); ++i)
    squares += (after[i] - start[i]).pow(2).sum().item<double>();
  // SGD with lr 0.5: the update's norm is lr times the clipped norm.
  EXPECT_NEAR(std::sqrt(squares), 0.5 * 1e-3, 1e-6);
  ASSERT_TRUE(outcomes[0].grad_norm.has_value());
  EXPECT_GT(*outcomes[0].grad_norm, 1e-3);  // it was clipped
  EXPECT_EQ(outcomes[0].grad_norm, outcomes[1].grad_norm);
  // Without the option no norm is computed.
  outcomes.clear();
  OneStep(plain, kExamples, kExamples, &outcomes);
  EXPECT_FALSE(outcomes[0].grad_norm.has_value());
}

TEST(TrainStepTest, BFloat16AutocastTrainsCloseToFloat32) {
  StepOptions fp32;
  StepOptions bf16;
  bf16.precision = Precision::kBFloat16;
  std::vector<StepOutcome> outcomes;
  const std::vector<at::Tensor> a = OneStep(fp32, kExamples, kExamples);
  const std::vector<at::Tensor> b =
      OneStep(bf16, kExamples, kExamples, &outcomes);
  // bfloat16 keeps 8 bits of mantissa: close, not equal.
  ExpectClose(a, b, 2e-2);
  bool any_differs = false;
  for (size_t i = 0; i < a.size(); ++i) any_differs |= !a[i].equal(b[i]);
  EXPECT_TRUE(any_differs) << "autocast changed nothing";
  EXPECT_FALSE(outcomes[0].skipped);
  for (const at::Tensor& p : b) EXPECT_EQ(p.scalar_type(), at::kFloat);
}

TEST(TrainStepTest, MisuseIsRefused) {
  backend::testing::RunRanks(1, Gloo, [&](backend::Backend& b) {
    auto model = std::make_shared<SmallNet>();
    auto ddp = ddp::DistributedDataParallel::Create(model, b);
    ASSERT_TRUE(ddp.ok());
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
    StepOptions o;
    o.accumulate_steps = 2;
    TrainStep step(o, *model, **ddp, sgd, c10::Device(c10::kCPU));
    EXPECT_EQ(step.Begin(0).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(step.Begin(3).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(step.MicroBatch(Inputs(0), Labels(0)).code(),
              absl::StatusCode::kFailedPrecondition);
    ASSERT_TRUE(step.Begin(2).ok());
    EXPECT_EQ(step.Begin(2).code(), absl::StatusCode::kFailedPrecondition);
    ASSERT_TRUE(step.MicroBatch(Inputs(0), Labels(0)).ok());
    EXPECT_EQ(step.Finish().status().code(),
              absl::StatusCode::kFailedPrecondition);
    // A shape the model cannot take: an error naming the failure.
    absl::Status bad =
        step.MicroBatch(at::zeros({2, 5}), Labels(0).slice(0, 0, 2));
    EXPECT_EQ(bad.code(), absl::StatusCode::kInternal);
    EXPECT_NE(std::string(bad.message()).find("forward/backward failed"),
              std::string::npos);
  });
}

TEST(MicroBatchSeedTest, DependsOnSeedRankAndIndexAndStaysBelow2To63) {
  std::set<uint64_t> seen;
  for (uint64_t seed : {0u, 1u}) {
    for (int rank : {0, 1, 2}) {
      for (int64_t i : {0, 1, 2, 1000}) {
        const uint64_t s = MicroBatchSeed(seed, rank, i);
        EXPECT_LT(s, uint64_t{1} << 63);
        EXPECT_EQ(s, MicroBatchSeed(seed, rank, i));
        seen.insert(s);
      }
    }
  }
  EXPECT_EQ(seen.size(), 2u * 3u * 4u);
}

}  // namespace
}  // namespace dtrain::trainer
