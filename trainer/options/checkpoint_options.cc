#include "trainer/options/checkpoint_options.h"

#include "absl/strings/str_cat.h"
#include "models/state_dict/state_dict_path.h"
#include "trainer/options/common.h"

namespace dtrain::trainer {

using options_internal::Invalid;

absl::Status ValidateCheckpointOptions(const CheckpointOptions& o) {
  if (!o.save_state_dict.empty() &&
      !models::state_dict::IsStateDictPath(o.save_state_dict)) {
    return Invalid(
        "save_state_dict",
        absl::StrCat("'", o.save_state_dict, "': the supported formats are ",
                     models::state_dict::kStateDictExtensions));
  }
  if (o.state_dict_with_checkpoints &&
      (o.save_state_dict.empty() || o.checkpoint_dir.empty()))
    return Invalid("state_dict_with_checkpoints",
                   "needs --save_state_dict and --checkpoint_dir");
  if (o.resume && o.checkpoint_dir.empty())
    return Invalid("resume", "needs --checkpoint_dir");
  if (o.checkpoint_every_steps < 0)
    return Invalid("checkpoint_every_steps", "must be >= 0");
  if (o.checkpoint_every_steps > 0 && o.checkpoint_dir.empty())
    return Invalid("checkpoint_every_steps", "needs --checkpoint_dir");
  if (o.keep_checkpoints < 1)
    return Invalid("keep_checkpoints", "must be >= 1");
  return absl::OkStatus();
}

}  // namespace dtrain::trainer
