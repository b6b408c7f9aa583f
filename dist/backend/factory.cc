#include "dist/backend/factory.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dist/backend/hierarchical/hierarchical_backend.h"
#include "dist/backend/nccl/nccl_backend.h"
#include "dist/backend/shm/shm_backend.h"
#include "dist/backend/stall/inspecting_backend.h"

namespace dtrain::backend {

absl::Status CheckBackendName(const std::string& name) {
  const std::vector<std::string>& known = KnownBackends();
  if (std::find(known.begin(), known.end(), name) != known.end())
    return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("unknown backend '", name,
                   "' (known: ", absl::StrJoin(known, ", "), ")"));
}

namespace {

absl::StatusOr<std::unique_ptr<Backend>> CreateBare(
    const Membership& group, const BackendConfig& config) {
  if (config.name == "gloo") {
    GlooBackendOptions o;
    o.iface = config.gloo_iface;
    o.hostname = config.gloo_hostname;
    o.algorithm = config.gloo_algorithm;
    if (!config.shm) return CreateGlooBackend(group, o);
    HierarchicalBackendOptions h;
    h.gloo = o;
    return CreateHierarchicalBackend(group, h);
  }
  if (config.name == "nccl") {
    NcclBackendOptions o;
    o.device = config.cuda_device;
    return CreateNcclBackend(group, o);
  }
  if (config.name == "shm") return CreateShmBackend(group);
  return CheckBackendName(config.name);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(
    const Membership& group, const BackendConfig& config) {
  absl::StatusOr<std::unique_ptr<Backend>> backend = CreateBare(group, config);
  if (!backend.ok() || group.world_size < 2 || group.store == nullptr ||
      config.stall_warning == absl::InfiniteDuration())
    return backend;
  StallInspectorOptions o;
  o.store = group.store;
  o.warn_after = config.stall_warning > absl::ZeroDuration()
                     ? config.stall_warning
                     : group.timeout / 2;
  return WithStallInspection(std::move(*backend), std::move(o));
}

}  // namespace dtrain::backend
