#include "dist/backend/process_group.h"

#include <utility>

#include "base/status_macros.h"

namespace dtrain::backend {

absl::StatusOr<ProcessGroup> InitProcessGroup(
    const ProcessGroupOptions& options, const rendezvous::EnvMap& env) {
  ProcessGroup group;
  DTRAIN_ASSIGN_OR_RETURN(group.world,
                          rendezvous::InitWorld(options.init, env));
  BackendConfig config = options.backend;
  if (config.gloo_iface.empty()) {
    config.gloo_iface = group.world.launch.gloo_socket_ifname;
  }
  DTRAIN_ASSIGN_OR_RETURN(
      group.backend,
      CreateBackend(group.world.membership(options.timeout), config));
  return group;
}

}  // namespace dtrain::backend
