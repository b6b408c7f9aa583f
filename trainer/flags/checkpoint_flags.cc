// The checkpoint section's flags (trainer/options/checkpoint_options.h).
#include <cstdint>
#include <string>

#include "absl/flags/flag.h"
#include "trainer/flags/train_flags.h"

ABSL_FLAG(std::string, checkpoint_dir, "", "Where rank 0 writes checkpoints.");
ABSL_FLAG(bool, resume, false,
          "Continue from the newest valid checkpoint in --checkpoint_dir "
          "(implied after a restart by the launcher).");
ABSL_FLAG(int64_t, checkpoint_every_steps, 0,
          "Also checkpoint every N steps inside an epoch.");
ABSL_FLAG(int, keep_checkpoints, 2, "Checkpoints kept (newest first).");
ABSL_FLAG(std::string, save_state_dict, "",
          "Rank 0 writes the trained model's state_dict here at the end, as "
          ".pt/.pth (torch.load reads it) or .safetensors, by extension, "
          "with torchvision's and the book's names.");
ABSL_FLAG(bool, state_dict_with_checkpoints, false,
          "Also write --save_state_dict with every checkpoint.");

namespace dtrain::trainer {

absl::Status ReadCheckpointFlags(CheckpointOptions* o) {
  o->checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  o->resume = absl::GetFlag(FLAGS_resume);
  o->checkpoint_every_steps = absl::GetFlag(FLAGS_checkpoint_every_steps);
  o->keep_checkpoints = absl::GetFlag(FLAGS_keep_checkpoints);
  o->save_state_dict = absl::GetFlag(FLAGS_save_state_dict);
  o->state_dict_with_checkpoints =
      absl::GetFlag(FLAGS_state_dict_with_checkpoints);
  return absl::OkStatus();
}

}  // namespace dtrain::trainer
