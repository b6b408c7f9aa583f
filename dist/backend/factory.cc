#include "dist/backend/factory.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dist/backend/hierarchical/hierarchical_backend.h"
#include "dist/backend/nccl/nccl_backend.h"
#include "dist/backend/shm/shm_backend.h"
#include "dist/backend/stall/inspecting_backend.h"

namespace dtrain::backend {

namespace {

absl::StatusOr<std::unique_ptr<Backend>> CreateBare(
    const BackendConfig& config) {
  if (config.name == "gloo") {
    GlooBackendOptions o;
    o.rank = config.rank;
    o.world_size = config.world_size;
    o.store = config.store;
    o.iface = config.gloo_iface;
    o.hostname = config.gloo_hostname;
    o.timeout = config.timeout;
    o.algorithm = config.gloo_algorithm;
    if (!config.shm) return CreateGlooBackend(o);
    HierarchicalBackendOptions h;
    h.gloo = o;
    return CreateHierarchicalBackend(h);
  }
  if (config.name == "nccl") {
    NcclBackendOptions o;
    o.rank = config.rank;
    o.world_size = config.world_size;
    o.store = config.store;
    o.device = config.cuda_device;
    o.timeout = config.timeout;
    return CreateNcclBackend(o);
  }
  if (config.name == "shm") {
    ShmBackendOptions o;
    o.rank = config.rank;
    o.world_size = config.world_size;
    o.store = config.store;
    o.timeout = config.timeout;
    return CreateShmBackend(o);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown backend '", config.name,
                   "' (known: ", absl::StrJoin(KnownBackends(), ", "), ")"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(
    const BackendConfig& config) {
  absl::StatusOr<std::unique_ptr<Backend>> backend = CreateBare(config);
  if (!backend.ok() || config.world_size < 2 || config.store == nullptr ||
      config.stall_warning == absl::InfiniteDuration())
    return backend;
  StallInspectorOptions o;
  o.store = config.store;
  o.warn_after = config.stall_warning > absl::ZeroDuration()
                     ? config.stall_warning
                     : config.timeout / 2;
  return WithStallInspection(std::move(*backend), std::move(o));
}

}  // namespace dtrain::backend
