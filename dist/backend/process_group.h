// A process's place in a data-parallel job in one call, as PyTorch's
// torch.distributed.init_process_group: InitWorld (the rendezvous, with rank
// and world size from the launcher's environment by default), then this
// rank's device (init_process_group's device_id: chosen from the local rank
// and made current), then CreateBackend for the world's membership.
//
//   ProcessGroupOptions options;
//   options.backend.name = "nccl";
//   options.device = "cuda";  // cuda:<local rank>
//   DTRAIN_ASSIGN_OR_RETURN(ProcessGroup group, InitProcessGroup(options));
//   // group.rank(), group.size(), group.cuda_device, *group.backend for DDP
//   // and collectives
//
// Lifetimes: the backend talks through the world's store, which on rank 0
// also serves the other ranks: ProcessGroup holds both and destroys the
// backend first; keep it alive until the ranks stop communicating.
//
// Thread-safe as InitWorld is: ranks may be threads of one process (tests),
// each with its own explicit arguments. The device is made current on the
// calling thread.
#ifndef DTRAIN_DIST_BACKEND_PROCESS_GROUP_H_
#define DTRAIN_DIST_BACKEND_PROCESS_GROUP_H_

#include <functional>
#include <memory>
#include <string>

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
  // Which backend and its knobs (CreateBackend): gloo by default. An empty
  // gloo_iface takes the launcher's GLOO_SOCKET_IFNAME; cuda_device is set
  // from `device`.
  BackendConfig backend;
  // Bounds creating the backend and every collective (Membership::timeout).
  absl::Duration timeout = absl::Minutes(30);
  // This rank's device: "cpu", "cuda" (cuda:<local rank>; cuda:0 where the
  // launcher left one device visible to each process) or "cuda:N", chosen
  // after the rendezvous by ChooseCudaDevice (device_choice.h) and made
  // current before the backend exists, so that no CUDA context lands on
  // another rank's GPU. The nccl backend runs on it and needs one; the CPU
  // backends reduce CPU tensors whatever it is.
  std::string device = "cpu";
  // Called once the ranks have met, before the device is chosen and the
  // backend created, for instance to say where the job runs (//trainer:train
  // prints the launcher and the store). May be empty.
  std::function<void(const rendezvous::World&)> on_rendezvous;
};

struct ProcessGroup {
  int rank() const { return world.rank; }
  int size() const { return world.world_size; }

  // Declared first, so destroyed after the backend that uses its store.
  rendezvous::World world;
  // The CUDA device chosen from ProcessGroupOptions::device and made current,
  // or -1 for "cpu".
  int cuda_device = -1;
  // What the backend was created with (the options' backend, completed with
  // the device and GLOO_SOCKET_IFNAME): another backend for this process, as
  // an elastic run's next generation makes, is created the same way.
  BackendConfig backend_config;
  std::unique_ptr<Backend> backend;
};

// Collective: every rank calls it with the same init method, backend and
// timeout. Before the rendezvous, kInvalidArgument for an unknown backend
// name (naming the known ones), a malformed device (ParseDevice's error) or
// nccl with device "cpu". Then InitWorld's errors as they are; after it every
// error starts with "[rank R] ": the device's (kFailedPrecondition "no CUDA
// device is usable" where LibTorch has no CUDA or sees no GPU, then
// ChooseCudaDevice's and SetCurrentCudaDevice's), then CreateBackend's.
absl::StatusOr<ProcessGroup> InitProcessGroup(
    const ProcessGroupOptions& options = {},
    const rendezvous::EnvMap& env = rendezvous::ProcessEnv());

}  // namespace dtrain::backend

#endif  // DTRAIN_DIST_BACKEND_PROCESS_GROUP_H_
