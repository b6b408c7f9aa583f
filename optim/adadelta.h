// Adadelta (Zeiler 2012) as PyTorch 1.13's torch.optim.Adadelta computes it,
// for LibTorch, which has no Adadelta. For each parameter with a gradient g:
//
//   g  <- -g if maximize;  g <- g + weight_decay * param
//   square_avg <- rho * square_avg + (1 - rho) * g^2
//   delta      <- sqrt(acc_delta + eps) / sqrt(square_avg + eps) * g
//   acc_delta  <- rho * acc_delta + (1 - rho) * delta^2
//   param      <- param - lr * delta
//
// with the same tensor operations in the same order, so results match
// PyTorch's to the last bit on the same LibTorch. Defaults are PyTorch's: lr
// 1.0, rho 0.9, eps 1e-6, weight_decay 0. State is created on a parameter's
// first step (step, square_avg, acc_delta, PyTorch's names) and is written by
// save() and read by load() (torch::save / torch::load work too).
//
// Unlike LibTorch 1.13's own optimizers, and like PyTorch's load_state_dict,
// load() also restores each group's options (lr, rho, eps, weight_decay,
// maximize), replaces the whole state, and moves it to each parameter's
// device and floating-point type.
//
// Not thread-safe; step() must not run concurrently with backward() on the
// same parameters.
#ifndef DTRAIN_OPTIM_ADADELTA_H_
#define DTRAIN_OPTIM_ADADELTA_H_

#include <torch/optim/optimizer.h>
#include <torch/optim/serialize.h>
#include <torch/serialize/archive.h>

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dtrain::optim {

struct AdadeltaOptions
    : public torch::optim::OptimizerCloneableOptions<AdadeltaOptions> {
  AdadeltaOptions() = default;
  // LibTorch's optimizer loading constructs options from a learning rate.
  explicit AdadeltaOptions(double lr) : lr_(lr) {}

  // Multiplies the delta before it is applied (not a step size in the usual
  // sense: Adadelta's deltas are already in parameter units).
  TORCH_ARG(double, lr) = 1.0;
  // Decay of both running averages.
  TORCH_ARG(double, rho) = 0.9;
  // Added inside both square roots.
  TORCH_ARG(double, eps) = 1e-6;
  // L2 penalty added to the gradient.
  TORCH_ARG(double, weight_decay) = 0;
  // Ascend the objective instead.
  TORCH_ARG(bool, maximize) = false;

  // TORCH_ARG leaves the access at private.
 public:
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;
  double get_lr() const override { return lr(); }
  void set_lr(const double lr) override { this->lr(lr); }

  friend bool operator==(const AdadeltaOptions& a, const AdadeltaOptions& b);
};

// kInvalidArgument naming the option when one is out of PyTorch's ranges: lr,
// eps, weight_decay >= 0 and 0 <= rho <= 1.
absl::Status Validate(const AdadeltaOptions& options);

struct AdadeltaParamState
    : public torch::optim::OptimizerCloneableParamState<AdadeltaParamState> {
  TORCH_ARG(int64_t, step) = 0;
  TORCH_ARG(torch::Tensor, square_avg);
  TORCH_ARG(torch::Tensor, acc_delta);

 public:
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;

  // Equal steps and element-wise equal tensors.
  friend bool operator==(const AdadeltaParamState& a,
                         const AdadeltaParamState& b);
};

class Adadelta : public torch::optim::Optimizer {
 public:
  // Throws c10::Error when `defaults` or a group's options are invalid (see
  // Validate) or a group's options belong to another optimizer.
  explicit Adadelta(std::vector<torch::optim::OptimizerParamGroup> param_groups,
                    AdadeltaOptions defaults = {});
  explicit Adadelta(std::vector<torch::Tensor> params,
                    AdadeltaOptions defaults = {});

  // As the constructors, with invalid options as kInvalidArgument.
  static absl::StatusOr<std::unique_ptr<Adadelta>> Create(
      std::vector<torch::optim::OptimizerParamGroup> param_groups,
      AdadeltaOptions defaults = {});

  // Parameters without a gradient are skipped; sparse gradients throw.
  torch::Tensor step(LossClosure closure = nullptr) override;

  void save(torch::serialize::OutputArchive& archive) const override;
  // Throws c10::Error, leaving the optimizer unchanged, when the archive's
  // groups or state do not fit this optimizer's parameters.
  void load(torch::serialize::InputArchive& archive) override;

  // The state of `param`, or null before its first step.
  const AdadeltaParamState* StateOf(const torch::Tensor& param) const;

 private:
  template <typename Self, typename Archive>
  static void serialize(Self& self, Archive& archive) {
    _TORCH_OPTIM_SERIALIZE_WITH_TEMPLATE_ARG(Adadelta);
  }
};

}  // namespace dtrain::optim

#endif  // DTRAIN_OPTIM_ADADELTA_H_
