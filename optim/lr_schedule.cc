#include "optim/lr_schedule.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace dtrain::optim {

absl::StatusOr<LrScheduleKind> ParseLrScheduleKind(absl::string_view name) {
  if (name == "step") return LrScheduleKind::kStep;
  if (name == "cosine") return LrScheduleKind::kCosine;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown learning-rate schedule '", name, "' (known: step, cosine)"));
}

const char* LrScheduleKindName(LrScheduleKind kind) {
  return kind == LrScheduleKind::kCosine ? "cosine" : "step";
}

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

absl::Status Validate(const LrScheduleOptions& options) {
  if (options.kind == LrScheduleKind::kStep)
    DTRAIN_RETURN_IF_ERROR(Validate(options.step));
  if (options.epochs < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LR schedule: epochs must be at least 1, got ", options.epochs));
  }
  if (options.steps_per_epoch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("LR schedule: steps per epoch must be at least 1, got ",
                     options.steps_per_epoch));
  }
  if (!(options.warmup_epochs >= 0) || !std::isfinite(options.warmup_epochs)) {
    return absl::InvalidArgumentError(
        absl::StrCat("LR schedule: warmup_epochs must be >= 0 and finite, got ",
                     options.warmup_epochs));
  }
  if (options.kind == LrScheduleKind::kCosine &&
      options.warmup_epochs >= static_cast<double>(options.epochs)) {
    return absl::InvalidArgumentError(
        absl::StrCat("LR schedule: the warmup (", options.warmup_epochs,
                     " epochs) leaves nothing of the ", options.epochs,
                     " epoch(s) for the cosine decay"));
  }
  return absl::OkStatus();
}

double StepLearningRate(double base_lr, int64_t epoch,
                        const StepLrOptions& options) {
  // pow with an integral exponent, as Python's 0.1 ** (epoch // 30).
  return base_lr * std::pow(options.gamma,
                            static_cast<double>(epoch / options.step_size));
}

double ScheduledLearningRate(double base_lr, int64_t epoch,
                             int64_t step_in_epoch,
                             const LrScheduleOptions& options) {
  const double step =
      static_cast<double>(epoch * options.steps_per_epoch + step_in_epoch);
  const double warmup_steps = options.warmup_epochs * options.steps_per_epoch;
  double lr;
  if (options.kind == LrScheduleKind::kStep) {
    lr = StepLearningRate(base_lr, epoch, options.step);
  } else {
    const double span =
        static_cast<double>(options.epochs * options.steps_per_epoch) -
        warmup_steps;
    const double t = std::clamp((step - warmup_steps) / span, 0.0, 1.0);
    lr = base_lr * 0.5 * (1.0 + std::cos(M_PI * t));
  }
  if (step < warmup_steps) lr *= std::min(1.0, (step + 1) / warmup_steps);
  return lr;
}

absl::StatusOr<LrSchedule> LrSchedule::Create(
    torch::optim::Optimizer& optimizer, const LrScheduleOptions& options) {
  DTRAIN_RETURN_IF_ERROR(Validate(options));
  std::vector<double> base_lrs;
  for (const torch::optim::OptimizerParamGroup& group :
       optimizer.param_groups()) {
    try {
      base_lrs.push_back(group.options().get_lr());
    } catch (const c10::Error& error) {
      // OptimizerOptions' default get_lr throws.
      return absl::InvalidArgumentError(
          absl::StrCat("LR schedule: the optimizer's options have no "
                       "learning rate: ",
                       error.what_without_backtrace()));
    }
  }
  return LrSchedule(optimizer, options, std::move(base_lrs));
}

absl::Status LrSchedule::SetStep(int64_t epoch, int64_t step_in_epoch) {
  if (epoch < 0 || step_in_epoch < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("LR schedule: epoch and step must be >= 0, got ", epoch,
                     " and ", step_in_epoch));
  }
  std::vector<torch::optim::OptimizerParamGroup>& groups =
      optimizer_->param_groups();
  if (groups.size() != base_lrs_.size()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "LR schedule: the optimizer has ", groups.size(),
        " parameter groups, the schedule was created for ", base_lrs_.size()));
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    groups[g].options().set_lr(LearningRate(epoch, step_in_epoch, g));
  }
  return absl::OkStatus();
}

double LrSchedule::LearningRate(int64_t epoch, int64_t step_in_epoch,
                                size_t group) const {
  return ScheduledLearningRate(base_lrs_.at(group), epoch, step_in_epoch,
                               options_);
}

}  // namespace dtrain::optim
