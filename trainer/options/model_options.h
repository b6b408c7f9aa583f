// The model section of train's options (--model, --small_input_stem,
// --init_state_dict*): which network, and the weights it starts from.
// Consumed by run_parts' BuildModel. A plain value type.
#ifndef DTRAIN_TRAINER_OPTIONS_MODEL_OPTIONS_H_
#define DTRAIN_TRAINER_OPTIONS_MODEL_OPTIONS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace dtrain::trainer {

struct ModelOptions {
  // A name of models/model_catalog.h ("convnet", "resnet18", or one a library
  // linked into the program registered).
  std::string name = "convnet";
  // ResNet-18's 3x3 stride-1 stem for small images.
  bool small_input_stem = false;
  // PyTorch-compatible weights (models/state_dict) every rank loads before
  // training (a checkpoint resumed from overrides them): ".safetensors",
  // ".pt" or ".pth". Empty: none.
  std::string init_state_dict;
  // How they are matched to the model (models/state_dict's LoadOptions):
  // false allows names missing from the file or not in the model (PyTorch's
  // strict=False); the excluded names or prefixes ("fc") keep their fresh
  // initialisation, to fine-tune with a new head.
  bool init_state_dict_strict = true;
  std::vector<std::string> init_state_dict_exclude;
};

// kInvalidArgument naming the flag: an unknown model (the catalog's message
// lists the known ones), a stem the model lacks, a weights file of an
// unsupported format, matching options without weights.
absl::Status ValidateModelOptions(const ModelOptions& o);

}  // namespace dtrain::trainer

#endif  // DTRAIN_TRAINER_OPTIONS_MODEL_OPTIONS_H_
