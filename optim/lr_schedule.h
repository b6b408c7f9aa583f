// Learning-rate schedules, set per optimizer step:
//
// - step (the ImageNet/ResNet tutorials'): the rate starts at each group's
//   base and is multiplied by gamma every step_size epochs,
//     lr(epoch) = base_lr * gamma ^ floor(epoch / step_size)
//   (lr x 0.1 every 30 epochs by default);
// - cosine: from the base down to 0 over the run's epochs, per step,
//     lr(s) = base_lr * (1 + cos(pi * (s - W) / (S - W))) / 2
//   for step s of S in all, W the warmup's steps (torch.optim's
//   CosineAnnealingLR with eta_min 0, stepped per batch).
//
// Either may start with a linear warmup over warmup_epochs (fractional
// allowed): step s of the first W gets base_lr * (s + 1) / W, as in Goyal et
// al.'s large-batch recipe. Everything is computed from the position (epoch,
// step in the epoch) rather than by repeated multiplication, as the tutorial's
// adjust_learning_rate does, so that a job resumed anywhere gets the rate of
// one that never stopped. Works with any torch::optim::Optimizer whose options
// implement set_lr (LibTorch's and this package's Adadelta).
#ifndef DTRAIN_OPTIM_LR_SCHEDULE_H_
#define DTRAIN_OPTIM_LR_SCHEDULE_H_

#include <torch/optim/optimizer.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace dtrain::optim {

struct StepLrOptions {
  int64_t step_size = 30;  // epochs between decays, >= 1
  double gamma = 0.1;      // factor per decay, > 0
};

enum class LrScheduleKind { kStep, kCosine };

// "step" or "cosine" and back; kInvalidArgument listing the names.
absl::StatusOr<LrScheduleKind> ParseLrScheduleKind(absl::string_view name);
const char* LrScheduleKindName(LrScheduleKind kind);

struct LrScheduleOptions {
  LrScheduleKind kind = LrScheduleKind::kStep;
  StepLrOptions step;  // kStep only
  // The run's length in epochs (cosine's horizon), >= 1.
  int64_t epochs = 1;
  // Linear warmup, in epochs (0: none); less than `epochs` for cosine.
  double warmup_epochs = 0;
  // Optimizer steps per epoch, >= 1.
  int64_t steps_per_epoch = 1;
};

// kInvalidArgument naming the field when a value is out of range.
absl::Status Validate(const StepLrOptions& options);
absl::Status Validate(const LrScheduleOptions& options);

// lr(epoch) of the step schedule for one base rate; epoch >= 0 and options
// valid.
double StepLearningRate(double base_lr, int64_t epoch,
                        const StepLrOptions& options);

// The rate for one base rate at step `step_in_epoch` (>= 0) of `epoch`
// (>= 0); options valid.
double ScheduledLearningRate(double base_lr, int64_t epoch,
                             int64_t step_in_epoch,
                             const LrScheduleOptions& options);

// Sets the learning rate of every parameter group of one optimizer. Holds a
// reference to the optimizer, which must outlive it. Not thread-safe.
class LrSchedule {
 public:
  // Takes each group's current lr as its base: create the schedule before
  // loading a checkpoint into the optimizer (whose saved lr may be decayed),
  // then call SetStep with the position to resume at.
  static absl::StatusOr<LrSchedule> Create(
      torch::optim::Optimizer& optimizer,
      const LrScheduleOptions& options = {});

  // Sets each group's lr for step `step_in_epoch` of `epoch` (both 0-based;
  // call before that optimizer step). kInvalidArgument for a negative
  // position, kFailedPrecondition when the optimizer's groups changed in
  // number since Create.
  absl::Status SetStep(int64_t epoch, int64_t step_in_epoch);
  // SetStep(epoch, 0).
  absl::Status SetEpoch(int64_t epoch) { return SetStep(epoch, 0); }

  // The rate group `group` (< base_lrs().size()) gets at that position.
  double LearningRate(int64_t epoch, int64_t step_in_epoch = 0,
                      size_t group = 0) const;

  absl::Span<const double> base_lrs() const { return base_lrs_; }
  const LrScheduleOptions& options() const { return options_; }

 private:
  LrSchedule(torch::optim::Optimizer& optimizer, LrScheduleOptions options,
             std::vector<double> base_lrs)
      : optimizer_(&optimizer),
        options_(options),
        base_lrs_(std::move(base_lrs)) {}

  torch::optim::Optimizer* optimizer_;
  LrScheduleOptions options_;
  std::vector<double> base_lrs_;
};

}  // namespace dtrain::optim

#endif  // DTRAIN_OPTIM_LR_SCHEDULE_H_
