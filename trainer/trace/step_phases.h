// When the parts of one optimizer step ran on this rank, on this host's clock
// (absl::Now): what TrainStep measures and the trace (step_trace.h) shows.
// On CUDA they are the host's view: from queuing the work to the next point
// that waited for it. A plain value type.
#ifndef DTRAIN_TRAINER_TRACE_STEP_PHASES_H_
#define DTRAIN_TRAINER_TRACE_STEP_PHASES_H_

#include <vector>

#include "absl/time/time.h"

namespace dtrain::trainer {

struct TimeSpan {
  absl::Time start;
  absl::Time end;
};

struct StepPhases {
  // Per micro-batch: forward with the loss (and DDP's buffer broadcast
  // before it), then backward (with the gradient hooks' bucket launches).
  std::vector<TimeSpan> forward;
  std::vector<TimeSpan> backward;
  // Waiting for the averaged gradients (DDP's SynchronizeGradients).
  TimeSpan synchronize;
  // Unscaling, clipping, the optimizer's step and the model averager.
  TimeSpan optimizer;
};

}  // namespace dtrain::trainer

#endif  // DTRAIN_TRAINER_TRACE_STEP_PHASES_H_
