// Builds a model by name from one options struct, so that binaries can take
// the model as a flag: the built-in models ("convnet", "resnet18") and any a
// user's library registers (RegisterModel, ModelRegistration). Unknown names
// and options the model cannot honour come back as kInvalidArgument, never as
// exceptions.
//
// Registering a model of your own (docs/OWN_MODEL.md):
//
//   absl::StatusOr<std::shared_ptr<dtrain::models::Model>> CreateMlp(
//       const dtrain::models::ModelConfig& config) {  // every field set
//     return std::shared_ptr<dtrain::models::Model>(std::make_shared<Mlp>(
//         *config.in_channels, *config.image_size, *config.num_classes));
//   }
//   const dtrain::models::ModelRegistration kMlp(
//       {"mlp", "two linear layers", 10, {1, 28, 28}}, &CreateMlp);
//
// The linker drops a static ModelRegistration in a cc_library when nothing
// else in its file is referenced: give that library `alwayslink = True`.
//
// Thread safety: every function may be called from any thread, also while
// another registers a model. Registrations last for the life of the process.
#ifndef DTRAIN_MODELS_REGISTRY_H_
#define DTRAIN_MODELS_REGISTRY_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/optional.h"
#include "models/model.h"

namespace dtrain::models {

// Options common to the registry's models; unset fields take the model's
// default (ModelInfo): CreateModel sets them before calling the factory.
struct ModelConfig {
  absl::optional<int64_t> num_classes;
  absl::optional<int64_t> in_channels;
  // Side of the square input images. The ConvNet's fc1 depends on it;
  // ResNet-18 takes any size and ignores it.
  absl::optional<int64_t> image_size;
  // ResNet-18 only (ResNet18Options::small_input_stem); an error for the
  // other built-in models, and a registered model without such an option
  // should refuse it too.
  bool small_input_stem = false;
};

struct ModelInfo {
  // What --model takes: a lowercase letter, then lowercase letters, digits,
  // '_' or '-' ("resnet18").
  std::string name;
  std::string description;  // one line
  // >= 1.
  int64_t default_num_classes = 0;
  // Channels, height, width of the input the model is made for, each >= 1;
  // the height is the default image_size.
  std::vector<int64_t> default_input_shape;
};

// Builds a model from a config whose num_classes, in_channels and image_size
// are set (CreateModel fills them from ModelInfo). Returns kInvalidArgument
// for options the model cannot honour; a LibTorch exception it throws becomes
// kInternal. May run on several threads at once. Draw initial weights only
// from LibTorch's global generator (as torch::nn's layers do), so that the
// same torch::manual_seed gives the same model on every rank and in a
// resumed run.
using ModelFactory = std::function<absl::StatusOr<std::shared_ptr<Model>>(
    const ModelConfig& config)>;

// Every model CreateModel knows, built-in and registered, sorted by name: a
// snapshot, which later registrations do not change.
std::vector<ModelInfo> KnownModels();

// "convnet, resnet18": for messages and flag help.
std::string KnownModelNames();

// kInvalidArgument listing the known names when `name` is unknown.
absl::StatusOr<ModelInfo> FindModel(absl::string_view name);

// Builds the model with freshly initialised weights (drawn from the global
// generator: seed with torch::manual_seed first for reproducible weights).
// Unset fields of `config` take the model's defaults (ModelInfo).
// kInvalidArgument for an unknown name or options out of range; kInternal
// when a factory throws or returns no model.
absl::StatusOr<std::shared_ptr<Model>> CreateModel(
    absl::string_view name, const ModelConfig& config = {});

// Adds a model that KnownModels, FindModel and CreateModel then know, and so
// every binary that takes a model by name (//trainer:train's --model).
// kInvalidArgument for a malformed name (see ModelInfo), an empty
// description, defaults out of range or a null factory; kAlreadyExists for a
// name that is already known, built-in or registered. Nothing is registered
// on error.
absl::Status RegisterModel(ModelInfo info, ModelFactory factory);

// Registers a model while the program starts, from a namespace-scope object
// in the model's own file (see the file comment):
//   const ModelRegistration kMyModel(info, &CreateMyModel);
// A refused registration (RegisterModel's errors) prints the reason to
// stderr and aborts the program: it is a mistake in how the program was put
// together, like two flags of one name.
class ModelRegistration {
 public:
  ModelRegistration(ModelInfo info, ModelFactory factory);
  ModelRegistration(const ModelRegistration&) = delete;
  ModelRegistration& operator=(const ModelRegistration&) = delete;
};

}  // namespace dtrain::models

#endif  // DTRAIN_MODELS_REGISTRY_H_
