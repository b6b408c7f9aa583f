// The optimizer codecs, through the checkpoint API: SGD's, Adadelta's,
// Adam's and AdamW's state and options round trip (all but SGD's options are
// restored), optimizer state that does not fit the optimizer changes
// nothing, and other optimizers are rejected.
#include <torch/nn/module.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>
#include <torch/types.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/torch_compat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "optim/adadelta.h"
#include "trainer/checkpoint/checkpoint.h"
#include "trainer/checkpoint/checkpoint_testing.h"

namespace dtrain::trainer {
namespace {

using ::dtrain::trainer::testing::BitwiseEqual;
using ::dtrain::trainer::testing::ExpectDecodeRejected;
using ::dtrain::trainer::testing::ExpectSameTensors;
using ::dtrain::trainer::testing::SomeState;
using ::dtrain::trainer::testing::StatusIs;
using ::dtrain::trainer::testing::Tiny;
using ::dtrain::trainer::testing::TinyCheckpoint;
using ::dtrain::trainer::testing::TinyStep;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

// SGD with momentum, as in TinyCheckpoint.
torch::optim::SGDOptions MomentumOptions() {
  return torch::optim::SGDOptions(0.1).momentum(0.9);
}

TEST(CheckpointTest, TinyWithBuffersAndAdadeltaRoundTrips) {
  torch::manual_seed(1);
  Tiny model;
  optim::Adadelta adadelta(model->parameters(),
                           optim::AdadeltaOptions().lr(0.5).rho(0.8));
  TinyStep(model, adadelta, 10);
  TinyStep(model, adadelta, 11);
  ASSERT_EQ(model->bn->num_batches_tracked.item<int64_t>(), 2);
  const TrainingState state = SomeState("tiny", "adadelta");
  absl::StatusOr<std::string> bytes = EncodeCheckpoint(*model, adadelta, state);
  ASSERT_TRUE(bytes.ok()) << bytes.status();

  torch::manual_seed(2);
  Tiny restored;
  optim::Adadelta restored_adadelta(restored->parameters());
  absl::StatusOr<TrainingState> decoded =
      DecodeCheckpoint(*bytes, *restored, restored_adadelta);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, state);
  ExpectSameTensors(*model, *restored);

  const std::vector<torch::Tensor> params = model->parameters();
  const std::vector<torch::Tensor> restored_params = restored->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    const optim::AdadeltaParamState* a = adadelta.StateOf(params[i]);
    const optim::AdadeltaParamState* b =
        restored_adadelta.StateOf(restored_params[i]);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(a->step(), b->step());
    EXPECT_TRUE(BitwiseEqual(a->square_avg(), b->square_avg())) << i;
    EXPECT_TRUE(BitwiseEqual(a->acc_delta(), b->acc_delta())) << i;
  }
  // Adadelta restores its options too (optim/adadelta.h).
  const auto& options = static_cast<const optim::AdadeltaOptions&>(
      restored_adadelta.param_groups()[0].options());
  EXPECT_EQ(options.lr(), 0.5);
  EXPECT_EQ(options.rho(), 0.8);

  TinyStep(model, adadelta, 12);
  TinyStep(restored, restored_adadelta, 12);
  ExpectSameTensors(*model, *restored);
}

// Adam (with amsgrad's max_exp_avg_sq) and AdamW (without): state, step and
// options restored exactly, so the next steps match.
template <typename Optimizer, typename Options, typename ParamState>
void ExpectAdamRoundTrips(const Options& options, const char* name) {
  SCOPED_TRACE(name);
  torch::manual_seed(1);
  Tiny model;
  Optimizer adam(model->parameters(), options);
  TinyStep(model, adam, 10);
  TinyStep(model, adam, 11);
  const TrainingState state = SomeState("tiny", name);
  absl::StatusOr<std::string> bytes = EncodeCheckpoint(*model, adam, state);
  ASSERT_TRUE(bytes.ok()) << bytes.status();

  torch::manual_seed(2);
  Tiny restored;
  Optimizer restored_adam(restored->parameters(), Options(0.9));
  absl::StatusOr<TrainingState> decoded =
      DecodeCheckpoint(*bytes, *restored, restored_adam);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, state);
  ExpectSameTensors(*model, *restored);
  const auto& got =
      static_cast<const Options&>(restored_adam.param_groups()[0].options());
  EXPECT_EQ(got.lr(), options.lr());
  EXPECT_EQ(got.betas(), options.betas());
  EXPECT_EQ(got.eps(), options.eps());
  EXPECT_EQ(got.weight_decay(), options.weight_decay());
  EXPECT_EQ(got.amsgrad(), options.amsgrad());
  const std::vector<torch::Tensor> params = model->parameters();
  const std::vector<torch::Tensor> restored_params = restored->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& a = static_cast<const ParamState&>(
        *adam.state().at(torch_compat::OptimizerStateKeyOf(params[i])));
    const auto& b = static_cast<const ParamState&>(*restored_adam.state().at(
        torch_compat::OptimizerStateKeyOf(restored_params[i])));
    EXPECT_EQ(a.step(), b.step());
    EXPECT_TRUE(BitwiseEqual(a.exp_avg(), b.exp_avg())) << i;
    EXPECT_TRUE(BitwiseEqual(a.exp_avg_sq(), b.exp_avg_sq())) << i;
    EXPECT_EQ(a.max_exp_avg_sq().defined(), b.max_exp_avg_sq().defined());
    if (a.max_exp_avg_sq().defined()) {
      EXPECT_TRUE(BitwiseEqual(a.max_exp_avg_sq(), b.max_exp_avg_sq())) << i;
    }
  }
  TinyStep(model, adam, 12);
  TinyStep(restored, restored_adam, 12);
  ExpectSameTensors(*model, *restored);
}

TEST(CheckpointTest, AdamAndAdamWRoundTrip) {
  ExpectAdamRoundTrips<torch::optim::Adam, torch::optim::AdamOptions,
                       torch::optim::AdamParamState>(
      torch::optim::AdamOptions(0.01)
          .betas(std::make_tuple(0.8, 0.99))
          .eps(1e-6)
          .weight_decay(1e-3)
          .amsgrad(true),
      "adam");
  ExpectAdamRoundTrips<torch::optim::AdamW, torch::optim::AdamWOptions,
                       torch::optim::AdamWParamState>(
      torch::optim::AdamWOptions(0.02).weight_decay(0.05), "adamw");
}

// LibTorch's SGD::load merges saved state into the existing one and keeps
// its options; DecodeCheckpoint replaces the state as PyTorch does, but the
// learning rate stays the optimizer's own.
TEST(CheckpointTest, DecodeReplacesSgdStateButKeepsItsOptions) {
  torch::manual_seed(1);
  Tiny model;
  torch::optim::SGD sgd(model->parameters(), MomentumOptions());
  // Encoded before any step: no momentum buffers.
  absl::StatusOr<std::string> bytes = EncodeCheckpoint(*model, sgd, {});
  ASSERT_TRUE(bytes.ok()) << bytes.status();

  Tiny restored;
  torch::optim::SGD restored_sgd(restored->parameters(),
                                 torch::optim::SGDOptions(0.3).momentum(0.5));
  TinyStep(restored, restored_sgd, 5);
  ASSERT_THAT(restored_sgd.state(), SizeIs(restored->parameters().size()));
  ASSERT_TRUE(DecodeCheckpoint(*bytes, *restored, restored_sgd).ok());
  EXPECT_THAT(restored_sgd.state(), IsEmpty());
  const auto& options = static_cast<const torch::optim::SGDOptions&>(
      restored_sgd.param_groups()[0].options());
  EXPECT_EQ(options.lr(), 0.3);
  EXPECT_EQ(options.momentum(), 0.5);
}

// One parameter group per list.
std::vector<torch::optim::OptimizerParamGroup> Groups(
    const std::vector<std::vector<torch::Tensor>>& params) {
  std::vector<torch::optim::OptimizerParamGroup> groups;
  for (const std::vector<torch::Tensor>& group : params) {
    groups.emplace_back(group);
  }
  return groups;
}

// Decodes `bytes` (SGD state of a Tiny model) into a Tiny model and an SGD
// with momentum over the parameter groups `groups_of` picks, after a step:
// kFailedPrecondition with `message`, nothing changed, and the SGD still has
// the state of its `state_size` parameters.
void ExpectSgdStateDoesNotFit(
    const std::string& bytes,
    std::vector<torch::optim::OptimizerParamGroup> (*groups_of)(Tiny& model),
    const std::string& message, size_t state_size) {
  torch::manual_seed(3);
  Tiny model;
  torch::optim::SGD sgd(groups_of(model), MomentumOptions());
  TinyStep(model, sgd, 4);
  ExpectDecodeRejected(
      bytes, *model, sgd,
      StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr(message)));
  EXPECT_THAT(sgd.state(), SizeIs(state_size));
}

TEST(CheckpointTest, OptimizerStateThatDoesNotFitChangesNothing) {
  const std::string bytes = TinyCheckpoint();  // SGD with momentum
  {
    // Another optimizer type.
    torch::manual_seed(3);
    Tiny model;
    optim::Adadelta adadelta(model->parameters());
    TinyStep(model, adadelta, 4);
    ExpectDecodeRejected(
        bytes, *model, adadelta,
        StatusIs(absl::StatusCode::kFailedPrecondition,
                 HasSubstr("optimizer state does not fit the optimizer: the "
                           "checkpoint holds sgd state, the optimizer is "
                           "adadelta")));
    for (const torch::Tensor& param : model->parameters()) {
      EXPECT_NE(adadelta.StateOf(param), nullptr);
    }
  }
  {
    // And the other way round.
    torch::manual_seed(3);
    Tiny model;
    optim::Adadelta adadelta(model->parameters());
    TinyStep(model, adadelta, 4);
    absl::StatusOr<std::string> adadelta_bytes =
        EncodeCheckpoint(*model, adadelta, {});
    ASSERT_TRUE(adadelta_bytes.ok()) << adadelta_bytes.status();
    torch::optim::SGD sgd(model->parameters(), MomentumOptions());
    TinyStep(model, sgd, 5);
    ExpectDecodeRejected(
        *adadelta_bytes, *model, sgd,
        StatusIs(absl::StatusCode::kFailedPrecondition,
                 HasSubstr("the checkpoint holds adadelta state, the optimizer "
                           "is sgd")));
    EXPECT_THAT(sgd.state(), SizeIs(model->parameters().size()));
  }
  {
    SCOPED_TRACE("an optimizer over only some of the parameters");
    ExpectSgdStateDoesNotFit(
        bytes, [](Tiny& model) { return Groups({model->fc->parameters()}); },
        "parameter group 0 has 6 parameters in the checkpoint, 2 in the "
        "optimizer",
        2);
  }
  {
    SCOPED_TRACE("the same parameters in two groups");
    ExpectSgdStateDoesNotFit(
        bytes,
        [](Tiny& model) {
          std::vector<torch::Tensor> rest = model->bn->parameters();
          for (const torch::Tensor& t : model->head->parameters()) {
            rest.push_back(t);
          }
          return Groups({model->fc->parameters(), rest});
        },
        "the checkpoint has 1 parameter groups, the optimizer 2", 6);
  }
  {
    SCOPED_TRACE("the model's parameters in another order");
    // State goes by position.
    ExpectSgdStateDoesNotFit(
        bytes,
        [](Tiny& model) {
          std::vector<torch::Tensor> reversed = model->parameters();
          std::reverse(reversed.begin(), reversed.end());
          return Groups({reversed});
        },
        "parameter 0 of group 0 has shape [3], its state in the checkpoint "
        "[8, 4]",
        6);
  }
  {
    // An optimizer checkpoints do not support.
    torch::manual_seed(3);
    Tiny model;
    torch::optim::RMSprop rmsprop(model->parameters());
    ExpectDecodeRejected(bytes, *model, rmsprop,
                         StatusIs(absl::StatusCode::kFailedPrecondition,
                                  HasSubstr("the optimizer is neither")));
  }
}

TEST(CheckpointTest, EncodeRejectsOtherOptimizersAndUnsupportedTensors) {
  torch::manual_seed(1);
  Tiny model;
  torch::optim::RMSprop rmsprop(model->parameters());
  EXPECT_THAT(
      EncodeCheckpoint(*model, rmsprop, {}).status(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("checkpoints support sgd, adadelta, adam and adamw")));

  torch::nn::Module complex;
  const torch::Tensor p = complex.register_parameter("p", torch::zeros({2}));
  complex.register_buffer("z", torch::zeros({2}, torch::kComplexFloat));
  torch::optim::SGD sgd({p}, torch::optim::SGDOptions(0.1));
  EXPECT_THAT(EncodeCheckpoint(complex, sgd, {}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("buffer z has dtype ComplexFloat; "
                                 "checkpoints hold float32, float64")));
}

}  // namespace
}  // namespace dtrain::trainer
