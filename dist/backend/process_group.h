// A process's place in a data-parallel job in one call, as PyTorch's
// torch.distributed.init_process_group: InitWorld (the rendezvous, with rank
// and world size from the launcher's environment by default) and then
// CreateBackend through the store the ranks met in.
//
//   DTRAIN_ASSIGN_OR_RETURN(ProcessGroup group, InitProcessGroup());
//   // group.rank(), group.size(), *group.backend for DDP and collectives
//
// Lifetimes: the backend talks through the world's store, which on rank 0
// also serves the other ranks: ProcessGroup holds both and destroys the
// backend first; keep it alive until the ranks stop communicating.
//
// Thread-safe as InitWorld is: ranks may be threads of one process (tests),
// each with its own explicit arguments.
#ifndef DTRAIN_DIST_BACKEND_PROCESS_GROUP_H_
#define DTRAIN_DIST_BACKEND_PROCESS_GROUP_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dist/backend/backend.h"
#include "dist/backend/factory.h"
#include "dist/rendezvous/init.h"
#include "dist/rendezvous/launch_env.h"

namespace dtrain::backend {

struct ProcessGroupOptions {
  // How the ranks meet (InitWorld): env:// by default.
  rendezvous::InitOptions init;
  // Which backend and its knobs (CreateBackend, for the world's membership):
  // gloo by default. An empty gloo_iface takes the launcher's
  // GLOO_SOCKET_IFNAME.
  BackendConfig backend;
  // Bounds creating the backend and every collective (Membership::timeout).
  absl::Duration timeout = absl::Minutes(30);
};

struct ProcessGroup {
  int rank() const { return world.rank; }
  int size() const { return world.world_size; }

  // Declared first, so destroyed after the backend that uses its store.
  rendezvous::World world;
  std::unique_ptr<Backend> backend;
};

// Collective: every rank calls it with the same init method and backend.
// InitWorld's errors, then CreateBackend's, as they are.
absl::StatusOr<ProcessGroup> InitProcessGroup(
    const ProcessGroupOptions& options = {},
    const rendezvous::EnvMap& env = rendezvous::ProcessEnv());

}  // namespace dtrain::backend

#endif  // DTRAIN_DIST_BACKEND_PROCESS_GROUP_H_
