// Builds a model by name ("convnet", "resnet18") from one options struct, so
// that binaries can take the model as a flag. Unknown names and options the
// model cannot honour come back as kInvalidArgument, never as exceptions.
#ifndef DTRAIN_MODELS_REGISTRY_H_
#define DTRAIN_MODELS_REGISTRY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/optional.h"
#include "models/model.h"
#include "models/norm_layer.h"

namespace dtrain::models {

// Options common to the registry's models; unset fields take the model's
// default (ModelInfo).
struct ModelConfig {
  absl::optional<int64_t> num_classes;
  absl::optional<int64_t> in_channels;
  // Side of the square input images. The ConvNet's fc1 depends on it;
  // ResNet-18 takes any size and ignores it.
  absl::optional<int64_t> image_size;
  // ResNet-18 only (ResNet18Options::small_input_stem); an error for others.
  bool small_input_stem = false;
  // Builds the batch norms of models that have them (ModelInfo::batch_norm;
  // ResNet18Options::norm_layer); empty: BatchNorm2d. Models without batch
  // norm ignore it, as torch.nn.SyncBatchNorm.convert_sync_batchnorm leaves
  // them unchanged.
  NormLayerFactory norm_layer;
};

struct ModelInfo {
  std::string name;         // "resnet18"
  std::string description;  // one line
  int64_t default_num_classes = 0;
  // Channels, height, width of the input the model is made for.
  std::vector<int64_t> default_input_shape;
  // Whether the model has batch norm layers (takes ModelConfig::norm_layer).
  bool batch_norm = false;
};

// Every model CreateModel knows, sorted by name.
const std::vector<ModelInfo>& KnownModels();

// "convnet, resnet18": for messages and flag help.
std::string KnownModelNames();

// kInvalidArgument listing the known names when `name` is unknown.
absl::StatusOr<ModelInfo> FindModel(absl::string_view name);

// Builds the model with freshly initialised weights (drawn from the global
// generator: seed with torch::manual_seed first for reproducible weights).
// kInvalidArgument for an unknown name or options out of range.
absl::StatusOr<std::shared_ptr<Model>> CreateModel(
    absl::string_view name, const ModelConfig& config = {});

}  // namespace dtrain::models

#endif  // DTRAIN_MODELS_REGISTRY_H_
