// The run's own flags: its seed, evaluation only, validation.
#include <cstdint>

#include "absl/flags/flag.h"
#include "trainer/flags/train_flags.h"

ABSL_FLAG(uint64_t, seed, 0, "Seed of weights, shuffling and dropout.");
ABSL_FLAG(bool, evaluate, false,
          "Only validate the model from --init_state_dict, or from the "
          "newest checkpoint with --checkpoint_dir --resume.");
ABSL_FLAG(bool, skip_validation, false, "No validation pass.");
ABSL_FLAG(int64_t, num_sanity_val_steps, 2,
          "Validation batches per rank run before the first step, so that a "
          "broken validation split or model fails at once (0: none).");
ABSL_FLAG(bool, print_cuda_devices, false,
          "Print how many CUDA devices this binary's LibTorch sees, and exit.");

namespace dtrain::trainer {

absl::Status ReadRunFlags(TrainOptions* o) {
  o->seed = absl::GetFlag(FLAGS_seed);
  o->evaluate = absl::GetFlag(FLAGS_evaluate);
  o->skip_validation = absl::GetFlag(FLAGS_skip_validation);
  o->num_sanity_val_steps = absl::GetFlag(FLAGS_num_sanity_val_steps);
  return absl::OkStatus();
}

bool PrintCudaDevicesRequested() {
  return absl::GetFlag(FLAGS_print_cuda_devices);
}

}  // namespace dtrain::trainer
