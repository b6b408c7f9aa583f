// The step learning-rate schedule of the ImageNet/ResNet tutorials: the rate
// starts at each group's base and is multiplied by gamma every step_size
// epochs,
//
//   lr(epoch) = base_lr * gamma ^ floor(epoch / step_size)
//
// (lr x 0.1 every 30 epochs by default). Computed from the epoch rather than
// by repeated multiplication, as the tutorial's adjust_learning_rate does, so
// that a job resumed at epoch N gets the same rate as one that never stopped.
// Works with any torch::optim::Optimizer whose options implement set_lr
// (LibTorch's and this package's Adadelta).
#ifndef DTRAIN_OPTIM_LR_SCHEDULE_H_
#define DTRAIN_OPTIM_LR_SCHEDULE_H_

#include <torch/optim/optimizer.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace dtrain::optim {

struct StepLrOptions {
  int64_t step_size = 30;  // epochs between decays, >= 1
  double gamma = 0.1;      // factor per decay, > 0
};

// kInvalidArgument naming the field when a value is out of range.
absl::Status Validate(const StepLrOptions& options);

// lr(epoch) for one base rate; epoch >= 0 and options valid.
double StepLearningRate(double base_lr, int64_t epoch,
                        const StepLrOptions& options);

// Sets the learning rate of every parameter group of one optimizer. Holds a
// reference to the optimizer, which must outlive it. Not thread-safe.
class StepLrSchedule {
 public:
  // Takes each group's current lr as its base: create the schedule before
  // loading a checkpoint into the optimizer (whose saved lr may be decayed),
  // then call SetEpoch with the epoch to resume at.
  static absl::StatusOr<StepLrSchedule> Create(
      torch::optim::Optimizer& optimizer, const StepLrOptions& options = {});

  // Sets each group's lr for `epoch` (0-based; call before the epoch's first
  // step). kInvalidArgument for a negative epoch, kFailedPrecondition when the
  // optimizer's groups changed in number since Create.
  absl::Status SetEpoch(int64_t epoch);

  // The rate group `group` (< base_lrs().size()) gets at `epoch` (>= 0).
  double LearningRate(int64_t epoch, size_t group = 0) const;

  absl::Span<const double> base_lrs() const { return base_lrs_; }
  const StepLrOptions& options() const { return options_; }

 private:
  StepLrSchedule(torch::optim::Optimizer& optimizer, StepLrOptions options,
                 std::vector<double> base_lrs)
      : optimizer_(&optimizer),
        options_(options),
        base_lrs_(std::move(base_lrs)) {}

  torch::optim::Optimizer* optimizer_;
  StepLrOptions options_;
  std::vector<double> base_lrs_;
};

}  // namespace dtrain::optim

#endif  // DTRAIN_OPTIM_LR_SCHEDULE_H_
