// The checkpoint section of train's options: the checkpoint directory and
// how often rank 0 writes there, resuming, and the PyTorch-compatible weights
// written at the end. Consumed by run_assembly and run_outputs. A plain value
// type.
#ifndef DTRAIN_TRAINER_OPTIONS_CHECKPOINT_OPTIONS_H_
#define DTRAIN_TRAINER_OPTIONS_CHECKPOINT_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace dtrain::trainer {

struct CheckpointOptions {
  // Rank 0 writes checkpoints here; every rank loads. Empty: none.
  std::string checkpoint_dir;
  // Continue from the newest valid checkpoint in checkpoint_dir (starting
  // afresh, with a message, when there is none).
  bool resume = false;
  // Also checkpoint every N optimizer steps inside an epoch (0: at the end of
  // each epoch only).
  int64_t checkpoint_every_steps = 0;
  int keep_checkpoints = 2;
  // Rank 0 writes PyTorch-compatible weights (models/state_dict) here at the
  // end, and with every checkpoint when state_dict_with_checkpoints (so that
  // it holds the newest checkpointed weights should the run end early).
  // ".safetensors", ".pt" or ".pth". Empty: none.
  std::string save_state_dict;
  bool state_dict_with_checkpoints = false;
};

// kInvalidArgument naming the flag.
absl::Status ValidateCheckpointOptions(const CheckpointOptions& o);

}  // namespace dtrain::trainer

#endif  // DTRAIN_TRAINER_OPTIONS_CHECKPOINT_OPTIONS_H_
