#include "models/model_catalog.h"

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

namespace dtrain::models {
namespace {

using internal::CatalogEntry;

// The built-in models (registry.cc builds them) and those registered since
// the program started.
// std::mutex rather than absl::Mutex: Debian's Abseil is not built for
// ThreadSanitizer (see data/loader.h).
class Catalog {
 public:
  Catalog()
      : entries_{
            {{"convnet",
              "the book's MNIST ConvNet: 2 convolutions, 2 linear layers, "
              "dropout",
              10,
              {1, 28, 28},
              /*batch_norm=*/false},
             nullptr,
             true},
            {{"resnet18",
              "ResNet-18 as in torchvision: BasicBlocks [2, 2, 2, 2], batch "
              "norm",
              1000,
              {3, 224, 224},
              /*batch_norm=*/true},
             nullptr,
             true},
        } {}

  absl::Status Add(CatalogEntry entry) {
    std::lock_guard<std::mutex> lock(mu_);
    if (const CatalogEntry* known = FindLocked(entry.info.name);
        known != nullptr) {
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
  absl::optional<CatalogEntry> Find(absl::string_view name) const {
    std::lock_guard<std::mutex> lock(mu_);
    const CatalogEntry* entry = FindLocked(name);
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
  const CatalogEntry* FindLocked(absl::string_view name) const {
    for (const CatalogEntry& e : entries_) {
      if (e.info.name == name) return &e;
    }
    return nullptr;
  }

  std::vector<ModelInfo> InfosLocked() const {
    std::vector<ModelInfo> infos;
    for (const CatalogEntry& e : entries_) infos.push_back(e.info);
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
  std::vector<CatalogEntry> entries_;  // guarded by mu_
};

// Constructed on first use, so that registrations from other files' static
// initializers find it whatever the order of initialization.
Catalog& GlobalCatalog() {
  static auto* const catalog = new Catalog();
  return *catalog;
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

std::vector<ModelInfo> KnownModels() { return GlobalCatalog().Infos(); }

std::string KnownModelNames() { return GlobalCatalog().Names(); }

absl::StatusOr<ModelInfo> FindModel(absl::string_view name) {
  absl::optional<CatalogEntry> entry = GlobalCatalog().Find(name);
  if (entry.has_value()) return entry->info;
  // A registration the linker dropped is the usual way a model the user did
  // register goes missing: say so where it shows.
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown model \"", name, "\"; known models: ", KnownModelNames(),
      " (a model registered with ModelRegistration or RegisterModel in a "
      "cc_library is linked only with alwayslink = True on that library)"));
}

absl::Status RegisterModel(ModelInfo info, ModelFactory factory) {
  DTRAIN_RETURN_IF_ERROR(CheckInfo(info));
  if (!factory) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot register model \"", info.name, "\": the factory is null"));
  }
  return GlobalCatalog().Add(
      CatalogEntry{std::move(info), std::move(factory), false});
}

ModelRegistration::ModelRegistration(ModelInfo info, ModelFactory factory) {
  const absl::Status status =
      RegisterModel(std::move(info), std::move(factory));
  if (!status.ok()) {
    std::fprintf(stderr, "dtrain: %s\n", std::string(status.message()).c_str());
    std::abort();
  }
}

namespace internal {

absl::optional<CatalogEntry> FindCatalogEntry(absl::string_view name) {
  return GlobalCatalog().Find(name);
}

}  // namespace internal
}  // namespace dtrain::models
