// Builds a model by name from one options struct, so that binaries can take
// the model as a flag: the built-in models ("convnet", "resnet18") and any a
// user's library registers. Which models exist, and registering one, is
// model_catalog.h's (included here). Unknown names and options the model
// cannot honour come back as kInvalidArgument, never as exceptions.
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
// in a cc_library with `alwayslink = True` (see model_catalog.h).
//
// Thread safety: CreateModel may be called from any thread.
#ifndef DTRAIN_MODELS_REGISTRY_H_
#define DTRAIN_MODELS_REGISTRY_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "models/model.h"
#include "models/model_catalog.h"
#include "models/norm_layer.h"

namespace dtrain::models {

// Builds the model with freshly initialised weights (drawn from the global
// generator: seed with torch::manual_seed first for reproducible weights).
// Unset fields of `config` take the model's defaults (ModelInfo).
// kInvalidArgument for an unknown name or options out of range; kInternal
// when a factory throws or returns no model.
absl::StatusOr<std::shared_ptr<Model>> CreateModel(
    absl::string_view name, const ModelConfig& config = {});

}  // namespace dtrain::models

#endif  // DTRAIN_MODELS_REGISTRY_H_
