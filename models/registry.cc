#include "models/registry.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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
  if (config.image_size.has_value() && *config.image_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "resnet18: image_size must be positive, got ", *config.image_size));
  }
  DTRAIN_RETURN_IF_ERROR(Validate(options));
  return std::shared_ptr<Model>(std::make_shared<ResNet18Impl>(options));
}

struct Entry {
  ModelInfo info;
  ModelFactory create;
  bool built_in = false;
};

// The built-in models and those registered since the program started.
// std::mutex rather than absl::Mutex: Debian's Abseil is not built for
// ThreadSanitizer (see data/loader.h).
class Registry {
 public:
  Registry()
      : entries_{
            {{"convnet",
              "the book's MNIST ConvNet: 2 convolutions, 2 linear layers, "
              "dropout",
              10,
              {1, 28, 28}},
             &CreateConvNet,
             true},
            {{"resnet18",
              "ResNet-18 as in torchvision: BasicBlocks [2, 2, 2, 2], batch "
              "norm",
              1000,
              {3, 224, 224}},
             &CreateResNet18,
             true},
        } {}

  absl::Status Add(Entry entry) {
    std::lock_guard<std::mutex> lock(mu_);
    if (const Entry* known = FindLocked(entry.info.name); known != nullptr) {
      return absl::AlreadyExistsError(absl::StrCat(
          "cannot register model \"", entry.info.name, "\": ",
          known->built_in ? "a built-in model has that name"
                          : "a model of that name is already registered",
          " (", known->info.description, "); known models: ", NamesLocked()));
    }
    entries_.push_back(std::move(entry));
    return absl::OkStatus();
  }

  // A copy, so that the caller may use it without the lock.
  absl::optional<Entry> Find(absl::string_view name) const {
    std::lock_guard<std::mutex> lock(mu_);
    const Entry* entry = FindLocked(name);
    if (entry == nullptr) return absl::nullopt;
    return *entry;
  }

  std::vector<ModelInfo> Infos() const {
    std::lock_guard<std::mutex> lock(mu_);
    return InfosLocked();
  }

  std::string Names() const {
    std::lock_guard<std::mutex> lock(mu_);
    return NamesLocked();
  }

 private:
  const Entry* FindLocked(absl::string_view name) const {
    for (const Entry& e : entries_) {
      if (e.info.name == name) return &e;
    }
    return nullptr;
  }

  std::vector<ModelInfo> InfosLocked() const {
    std::vector<ModelInfo> infos;
    for (const Entry& e : entries_) infos.push_back(e.info);
    std::sort(
        infos.begin(), infos.end(),
        [](const ModelInfo& a, const ModelInfo& b) { return a.name < b.name; });
    return infos;
  }

  std::string NamesLocked() const {
    return absl::StrJoin(InfosLocked(), ", ",
                         [](std::string* out, const ModelInfo& info) {
                           out->append(info.name);
                         });
  }

  mutable std::mutex mu_;
  std::vector<Entry> entries_;  // guarded by mu_
};

// Constructed on first use, so that registrations from other files' static
// initializers find it whatever the order of initialization.
Registry& GlobalRegistry() {
  static auto* const registry = new Registry();
  return *registry;
}

absl::Status CheckInfo(const ModelInfo& info) {
  const std::string& name = info.name;
  const bool well_formed = !name.empty() && absl::ascii_islower(name[0]) &&
                           std::all_of(name.begin(), name.end(), [](char c) {
                             return absl::ascii_islower(c) ||
                                    absl::ascii_isdigit(c) || c == '_' ||
                                    c == '-';
                           });
  if (!well_formed) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot register model \"", name,
                     "\": a name starts with a lowercase letter, followed by "
                     "lowercase letters, digits, '_' or '-'"));
  }
  const std::string prefix =
      absl::StrCat("cannot register model \"", name, "\": ");
  if (info.description.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "the description is empty"));
  }
  if (info.default_num_classes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "default_num_classes must be positive, got ",
                     info.default_num_classes));
  }
  const std::vector<int64_t>& shape = info.default_input_shape;
  if (shape.size() != 3 || std::any_of(shape.begin(), shape.end(),
                                       [](int64_t d) { return d < 1; })) {
    return absl::InvalidArgumentError(absl::StrCat(
        prefix,
        "default_input_shape must be three positive sizes (channels, height, "
        "width), got [",
        absl::StrJoin(shape, ", "), "]"));
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<ModelInfo> KnownModels() { return GlobalRegistry().Infos(); }

std::string KnownModelNames() { return GlobalRegistry().Names(); }

absl::StatusOr<ModelInfo> FindModel(absl::string_view name) {
  absl::optional<Entry> entry = GlobalRegistry().Find(name);
  if (entry.has_value()) return entry->info;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown model \"", name, "\"; known models: ", KnownModelNames()));
}

absl::StatusOr<std::shared_ptr<Model>> CreateModel(absl::string_view name,
                                                   const ModelConfig& config) {
  absl::optional<Entry> entry = GlobalRegistry().Find(name);
  if (!entry.has_value()) return FindModel(name).status();
  const ModelInfo& info = entry->info;
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
                         return entry->create(full);
                       }));
  if (model == nullptr) {
    return absl::InternalError(
        absl::StrCat("building ", name, ": its factory returned no model"));
  }
  return model;
}

absl::Status RegisterModel(ModelInfo info, ModelFactory factory) {
  DTRAIN_RETURN_IF_ERROR(CheckInfo(info));
  if (!factory) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot register model \"", info.name, "\": the factory is null"));
  }
  return GlobalRegistry().Add(Entry{std::move(info), std::move(factory)});
}

ModelRegistration::ModelRegistration(ModelInfo info, ModelFactory factory) {
  const absl::Status status =
      RegisterModel(std::move(info), std::move(factory));
  if (!status.ok()) {
    std::fprintf(stderr, "dtrain: %s\n", std::string(status.message()).c_str());
    std::abort();
  }
}

}  // namespace dtrain::models
