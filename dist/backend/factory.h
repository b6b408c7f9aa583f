// Creates a backend by name ("gloo", "nccl", "shm": shm_backend.h), as
// torch.distributed.init_process_group's `backend` argument does, for a
// Membership (membership.h: rank, world size, store, timeout). Every rank
// calls it with the same name, the same `shm` and the same store namespace.
//
// "gloo" is the CPU backend: with `shm` (the default) ranks that share a host
// reduce through shared memory and only one leader per host talks Gloo over
// TCP (hierarchical_backend.h), and the backend is named "gloo+shm" whatever
// the layout (Backend::layout() says how the ranks are spread: on one host
// only shared memory runs, with no two ranks on a host only Gloo); without
// it, Gloo over TCP between every pair of ranks, named "gloo". "shm" (shared
// memory only, one host) keeps its name.
#ifndef DTRAIN_DIST_BACKEND_FACTORY_H_
#define DTRAIN_DIST_BACKEND_FACTORY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dist/backend/backend.h"
#include "dist/backend/backend_names.h"
#include "dist/backend/gloo/gloo_backend.h"
#include "dist/backend/membership.h"

namespace dtrain::backend {

// Which backend, and its knobs; who the ranks are comes in the Membership.
struct BackendConfig {
  std::string name = "gloo";
  // gloo: the interface (GLOO_SOCKET_IFNAME) or address to use, and the
  // allreduce algorithm.
  std::string gloo_iface;
  std::string gloo_hostname;
  GlooAlgorithm gloo_algorithm = GlooAlgorithm::kAuto;
  // gloo: shared memory between the ranks of each host (see above).
  bool shm = true;
  // nccl: this rank's CUDA device (InitProcessGroup sets it from its
  // `device`).
  int cuda_device = 0;
  // Stall inspection (stall/stall_inspector.h), for more than one rank with a
  // store: a collective waiting this long gets a warning naming the ranks
  // that have not reached it, and a failed one the same report. Zero: half of
  // the membership's timeout; infinite: off.
  absl::Duration stall_warning = absl::ZeroDuration();
};

// kInvalidArgument naming the known backends (backend_names.h) unless `name`
// is one of them (CreateBackend's error for an unknown name).
absl::Status CheckBackendName(const std::string& name);

// kInvalidArgument naming the known backends for an unknown name; otherwise the
// chosen backend's own result (a bad membership: Membership::Check's error).
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(
    const Membership& group, const BackendConfig& config = {});

}  // namespace dtrain::backend

#endif  // DTRAIN_DIST_BACKEND_FACTORY_H_
