#include "models/registry.h"

#include <c10/util/Exception.h>

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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

struct Entry {
  ModelInfo info;
  absl::StatusOr<std::shared_ptr<Model>> (*create)(const ModelConfig&);
};

const std::vector<Entry>& Entries() {
  static const auto* const entries = new std::vector<Entry>{
      {{"convnet",
        "the book's MNIST ConvNet: 2 convolutions, 2 linear layers, dropout",
        10,
        {1, 28, 28},
        /*batch_norm=*/false},
       &CreateConvNet},
      {{"resnet18",
        "ResNet-18 as in torchvision: BasicBlocks [2, 2, 2, 2], batch norm",
        1000,
        {3, 224, 224},
        /*batch_norm=*/true},
       &CreateResNet18},
  };
  return *entries;
}

}  // namespace

const std::vector<ModelInfo>& KnownModels() {
  static const auto* const infos = [] {
    auto* v = new std::vector<ModelInfo>;
    for (const Entry& e : Entries()) v->push_back(e.info);
    std::sort(v->begin(), v->end(), [](const ModelInfo& a, const ModelInfo& b) {
      return a.name < b.name;
    });
    return v;
  }();
  return *infos;
}

std::string KnownModelNames() {
  return absl::StrJoin(
      KnownModels(), ", ",
      [](std::string* out, const ModelInfo& info) { out->append(info.name); });
}

absl::StatusOr<ModelInfo> FindModel(absl::string_view name) {
  for (const Entry& e : Entries()) {
    if (e.info.name == name) return e.info;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown model \"", name, "\"; known models: ", KnownModelNames()));
}

absl::StatusOr<std::shared_ptr<Model>> CreateModel(absl::string_view name,
                                                   const ModelConfig& config) {
  for (const Entry& e : Entries()) {
    if (e.info.name != name) continue;
    // Options were validated; anything LibTorch throws now is unexpected but
    // still reported as a status at this boundary.
    return base::GuardTorch(absl::StatusCode::kInternal,
                            absl::StrCat("building ", name, ": "),
                            [&]() -> absl::StatusOr<std::shared_ptr<Model>> {
                              return e.create(config);
                            });
  }
  return FindModel(name).status();
}

}  // namespace dtrain::models
