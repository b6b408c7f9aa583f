#include "optim/lr_schedule.h"

#include <c10/util/Exception.h>

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace dtrain::optim {

absl::Status Validate(const StepLrOptions& options) {
  if (options.step_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step LR schedule: step_size must be at least 1 epoch, got ",
        options.step_size));
  }
  if (!(options.gamma > 0) || !std::isfinite(options.gamma)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step LR schedule: gamma must be positive and finite, got ",
        options.gamma));
  }
  return absl::OkStatus();
}

double StepLearningRate(double base_lr, int64_t epoch,
                        const StepLrOptions& options) {
  // pow with an integral exponent, as Python's 0.1 ** (epoch // 30).
  return base_lr * std::pow(options.gamma,
                            static_cast<double>(epoch / options.step_size));
}

absl::StatusOr<StepLrSchedule> StepLrSchedule::Create(
    torch::optim::Optimizer& optimizer, const StepLrOptions& options) {
  DTRAIN_RETURN_IF_ERROR(Validate(options));
  std::vector<double> base_lrs;
  for (const torch::optim::OptimizerParamGroup& group :
       optimizer.param_groups()) {
    try {
      base_lrs.push_back(group.options().get_lr());
    } catch (const c10::Error& error) {
      // OptimizerOptions' default get_lr throws.
      return absl::InvalidArgumentError(
          absl::StrCat("step LR schedule: the optimizer's options have no "
                       "learning rate: ",
                       error.what_without_backtrace()));
    }
  }
  return StepLrSchedule(optimizer, options, std::move(base_lrs));
}

absl::Status StepLrSchedule::SetEpoch(int64_t epoch) {
  if (epoch < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("step LR schedule: epoch must be >= 0, got ", epoch));
  }
  std::vector<torch::optim::OptimizerParamGroup>& groups =
      optimizer_->param_groups();
  if (groups.size() != base_lrs_.size()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "step LR schedule: the optimizer has ", groups.size(),
        " parameter groups, the schedule was created for ", base_lrs_.size()));
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    groups[g].options().set_lr(LearningRate(epoch, g));
  }
  return absl::OkStatus();
}

double StepLrSchedule::LearningRate(int64_t epoch, size_t group) const {
  return StepLearningRate(base_lrs_.at(group), epoch, options_);
}

}  // namespace dtrain::optim
