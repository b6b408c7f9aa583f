// The bytes an optimizer's per-parameter state takes, for the optimizers the
// checkpoint format knows (checkpoint.h): what ZeRO divides by the number of
// ranks, reported in the metrics JSON.
//
// Thread safety: reads the optimizer only.
#ifndef DTRAIN_TRAINER_CHECKPOINT_OPTIMIZER_STATE_BYTES_H_
#define DTRAIN_TRAINER_CHECKPOINT_OPTIMIZER_STATE_BYTES_H_

#include <torch/optim/optimizer.h>

#include <cstdint>

#include "absl/status/statusor.h"

namespace dtrain::trainer {

// The sum of the state tensors' sizes in bytes over every parameter of every
// group (0 before the first step). kInvalidArgument for an optimizer the
// checkpoint format does not know.
absl::StatusOr<int64_t> OptimizerStateBytes(
    const torch::optim::Optimizer& optimizer);

}  // namespace dtrain::trainer

#endif  // DTRAIN_TRAINER_CHECKPOINT_OPTIMIZER_STATE_BYTES_H_
