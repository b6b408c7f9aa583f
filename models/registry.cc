#include "models/registry.h"

#include <c10/util/Exception.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/optional.h"
#include "base/status_macros.h"
#include "base/torch_guard.h"
#include "models/convnet.h"
#include "models/resnet.h"

namespace dtrain::models {
namespace {

absl::StatusOr<std::shared_ptr<Model>> CreateConvNet(
    const ModelConfig& config) {
  if (config.small_input_stem) {
    return absl::InvalidArgumentError(
        "convnet has no small_input_stem option (only resnet18 has)");
  }
  ConvNetOptions options;
  options.num_classes = config.num_classes.value_or(options.num_classes);
  options.in_channels = config.in_channels.value_or(options.in_channels);
  options.image_size = config.image_size.value_or(options.image_size);
  DTRAIN_RETURN_IF_ERROR(Validate(options));
  return std::shared_ptr<Model>(std::make_shared<ConvNetImpl>(options));
}

absl::StatusOr<std::shared_ptr<Model>> CreateResNet18(
    const ModelConfig& config) {
  ResNet18Options options;
  options.num_classes = config.num_classes.value_or(options.num_classes);
  options.in_channels = config.in_channels.value_or(options.in_channels);
  options.small_input_stem = config.small_input_stem;
  options.norm_layer = config.norm_layer;
  if (config.image_size.has_value() && *config.image_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "resnet18: image_size must be positive, got ", *config.image_size));
  }
  DTRAIN_RETURN_IF_ERROR(Validate(options));
  return std::shared_ptr<Model>(std::make_shared<ResNet18Impl>(options));
}

// The factories of the built-in models model_catalog.cc lists.
ModelFactory BuiltInFactory(const std::string& name) {
  if (name == "convnet") return &CreateConvNet;
  if (name == "resnet18") return &CreateResNet18;
  return nullptr;
}

}  // namespace

absl::StatusOr<std::shared_ptr<Model>> CreateModel(absl::string_view name,
                                                   const ModelConfig& config) {
  absl::optional<internal::CatalogEntry> entry =
      internal::FindCatalogEntry(name);
  if (!entry.has_value()) return FindModel(name).status();
  const ModelInfo& info = entry->info;
  ModelFactory create =
      entry->built_in ? BuiltInFactory(info.name) : entry->create;
  ModelConfig full = config;
  if (!full.num_classes) full.num_classes = info.default_num_classes;
  if (!full.in_channels) full.in_channels = info.default_input_shape[0];
  if (!full.image_size) full.image_size = info.default_input_shape[1];
  // Options were validated; anything LibTorch throws now is unexpected but
  // still reported as a status at this boundary.
  DTRAIN_ASSIGN_OR_RETURN(
      std::shared_ptr<Model> model,
      base::GuardTorch(absl::StatusCode::kInternal,
                       absl::StrCat("building ", name, ": "),
                       [&]() -> absl::StatusOr<std::shared_ptr<Model>> {
                         return create(full);
                       }));
  if (model == nullptr) {
    return absl::InternalError(
        absl::StrCat("building ", name, ": its factory returned no model"));
  }
  return model;
}

}  // namespace dtrain::models
