#include "dist/backend/process_group.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "dist/backend/device_choice.h"
#include "dist/backend/device_selection.h"
#include "dist/backend/membership.h"

namespace dtrain::backend {
namespace {

// What can be refused before the ranks meet, so that a bad argument does not
// leave the other ranks waiting.
absl::Status CheckArguments(const ProcessGroupOptions& options) {
  DTRAIN_RETURN_IF_ERROR(CheckBackendName(options.backend.name));
  DTRAIN_RETURN_IF_ERROR(ParseDevice(options.device).status());
  if (options.backend.name == "nccl" && options.device == "cpu") {
    return absl::InvalidArgumentError(
        "the nccl backend runs on a CUDA device: set the device to cuda "
        "(cuda:<local rank>) or cuda:N, not cpu");
  }
  return absl::OkStatus();
}

// The placement InitWorld found, as ChooseCudaDevice takes it.
RankPlacement PlacementOf(const rendezvous::World& world) {
  RankPlacement placement;
  placement.rank = world.rank;
  placement.world_size = world.world_size;
  placement.local_rank = world.local_rank;
  placement.local_world_size = world.local_world_size;
  placement.local_inferred = world.launch.local_inferred;
  return placement;
}

// `s` starting with "[rank R] " (once, where it already does).
absl::Status WithRank(int rank, const absl::Status& s) {
  const std::string prefix = absl::StrCat("[rank ", rank, "] ");
  if (absl::StartsWith(s.message(), prefix)) return s;
  return absl::Status(s.code(), absl::StrCat(prefix, s.message()));
}

}  // namespace

absl::StatusOr<ProcessGroup> InitProcessGroup(
    const ProcessGroupOptions& options, const rendezvous::EnvMap& env) {
  DTRAIN_RETURN_IF_ERROR(CheckArguments(options));
  ProcessGroup group;
  DTRAIN_ASSIGN_OR_RETURN(group.world,
                          rendezvous::InitWorld(options.init, env));
  if (options.on_rendezvous) options.on_rendezvous(group.world);
  const int rank = group.world.rank;
  // Before the backend: NCCL creates its context on the current device.
  absl::StatusOr<int> device =
      SelectCudaDevice(options.device, PlacementOf(group.world));
  if (!device.ok()) return WithRank(rank, device.status());
  group.cuda_device = *device;
  BackendConfig config = options.backend;
  config.cuda_device = std::max(0, group.cuda_device);
  if (config.gloo_iface.empty()) {
    config.gloo_iface = group.world.launch.gloo_socket_ifname;
  }
  group.backend_config = config;
  absl::StatusOr<std::unique_ptr<Backend>> backend =
      CreateBackend(group.world.membership(options.timeout), config);
  if (!backend.ok()) return WithRank(rank, backend.status());
  group.backend = *std::move(backend);
  return group;
}

}  // namespace dtrain::backend
