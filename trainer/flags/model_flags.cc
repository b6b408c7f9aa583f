// The model section's flags (trainer/options/model_options.h).
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_split.h"
#include "trainer/flags/train_flags.h"

ABSL_FLAG(std::string, model, "convnet",
          "Model: convnet, resnet18, or a model that a library linked into "
          "this binary registered (docs/OWN_MODEL.md).");
ABSL_FLAG(bool, small_input_stem, false,
          "ResNet-18 with a 3x3 stride-1 stem and no max-pool, for small "
          "images.");
ABSL_FLAG(std::string, init_state_dict, "",
          "Start from these weights: a PyTorch state_dict (.pt/.pth as "
          "torch.save writes it, or .safetensors), names, shapes and dtypes "
          "checked strictly (unless --init_state_dict_strict or "
          "--init_state_dict_exclude say otherwise).");
ABSL_FLAG(bool, init_state_dict_strict, true,
          "false: names of the model missing from --init_state_dict keep their "
          "fresh initialisation and the file's names not in the model are "
          "ignored, as PyTorch's load_state_dict(strict=False); shapes must "
          "still match.");
ABSL_FLAG(std::string, init_state_dict_exclude, "",
          "Comma-separated names or prefixes to leave out of "
          "--init_state_dict, on both sides: they keep their fresh "
          "initialisation, to fine-tune with a new head (fc for resnet18: "
          "fc.weight and fc.bias).");

namespace dtrain::trainer {

absl::Status ReadModelFlags(ModelOptions* o) {
  o->name = absl::GetFlag(FLAGS_model);
  o->small_input_stem = absl::GetFlag(FLAGS_small_input_stem);
  o->init_state_dict = absl::GetFlag(FLAGS_init_state_dict);
  o->init_state_dict_strict = absl::GetFlag(FLAGS_init_state_dict_strict);
  o->init_state_dict_exclude =
      absl::StrSplit(absl::GetFlag(FLAGS_init_state_dict_exclude), ',',
                     absl::SkipWhitespace());
  return absl::OkStatus();
}

}  // namespace dtrain::trainer
