// What models the registry (registry.h) can build: the built-in ones
// ("convnet", "resnet18") and any a user's library registers (RegisterModel,
// ModelRegistration; registry.h shows an example), with their descriptions
// and defaults. Without LibTorch, so that code that only checks or lists
// model names (the trainer's options, tools' flag help) does not link the
// models; registry.h builds them.
//
// The linker drops a static ModelRegistration in a cc_library when nothing
// else in its file is referenced: give that library `alwayslink = True`.
//
// Thread safety: every function may be called from any thread, also while
// another registers a model. Registrations last for the life of the process.
#ifndef DTRAIN_MODELS_MODEL_CATALOG_H_
#define DTRAIN_MODELS_MODEL_CATALOG_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/optional.h"

namespace torch::nn {
class AnyModule;
}  // namespace torch::nn

namespace dtrain::models {

class Model;  // model.h

// The factory a model builds its batch norm layers with (norm_layer.h, which
// has the contract); declared here without LibTorch's headers.
using NormLayerFactory =
    std::function<torch::nn::AnyModule(int64_t num_features)>;

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
  // Builds the batch norms of models that have them (ModelInfo::batch_norm;
  // ResNet18Options::norm_layer); empty: BatchNorm2d. Models without batch
  // norm ignore it, as torch.nn.SyncBatchNorm.convert_sync_batchnorm leaves
  // them unchanged. See norm_layer.h.
  NormLayerFactory norm_layer;
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
  // Whether the model has batch norm layers (takes ModelConfig::norm_layer).
  bool batch_norm = false;
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

// kInvalidArgument listing the known names when `name` is unknown, with a
// hint that a registering cc_library needs `alwayslink = True`.
absl::StatusOr<ModelInfo> FindModel(absl::string_view name);

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
// together, like two flags of one name. Trivially destructible, so it may be
// a global.
class ModelRegistration {
 public:
  ModelRegistration(ModelInfo info, ModelFactory factory);
  ModelRegistration(const ModelRegistration&) = delete;
  ModelRegistration& operator=(const ModelRegistration&) = delete;
};

namespace internal {

struct CatalogEntry {
  ModelInfo info;
  // Null for the built-in models, which registry.cc builds itself.
  ModelFactory create;
  bool built_in = false;
};

// The entry named `name`, a copy; for CreateModel.
absl::optional<CatalogEntry> FindCatalogEntry(absl::string_view name);

}  // namespace internal
}  // namespace dtrain::models

#endif  // DTRAIN_MODELS_MODEL_CATALOG_H_
