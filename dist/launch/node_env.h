// A node's launcher settings from its environment, as torchrun reads them and
// as Kubernetes operators set them, so that `launch` and `train` run unchanged
// under Kubeflow's PyTorchJob, Kubeflow Trainer v2 and Volcano
// (docs/LAUNCHERS.md, "Kubernetes"):
//
//   torchrun's flag --x takes its default from PET_X: PET_NPROC_PER_NODE
//   (a number, or "auto", "gpu", "cpu"), PET_NNODES ("N" or "MIN:MAX"),
//   PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT and PET_MAX_RESTARTS.
//   PyTorchJob sets them all (and RANK, WORLD_SIZE, MASTER_ADDR and
//   MASTER_PORT per pod); Trainer v2 sets only PET_*.
//
//   In a Kubernetes pod (KUBERNETES_SERVICE_HOST, which the kubelet sets in
//   every pod), where no PET_NNODES gives the nodes: WORLD_SIZE and RANK are
//   the pods and this pod's index, MASTER_ADDR and MASTER_PORT the master.
//   Volcano's pytorch plugin sets only those four, per pod.
//
// A setting given on the command line wins over both. Not supported, and
// refused naming the variable: a dynamic rendezvous (PET_RDZV_BACKEND, set by
// a PyTorchJob's elasticPolicy), whose node ranks the rendezvous hands out.
//
// Thread-safe: pure functions of their arguments.
#ifndef DTRAIN_DIST_LAUNCH_NODE_ENV_H_
#define DTRAIN_DIST_LAUNCH_NODE_ENV_H_

#include <string>

#include "absl/status/statusor.h"
#include "dist/launch/launcher.h"
#include "dist/rendezvous/launch_env.h"

namespace dtrain::launch {

// Which of the launcher's settings the command line gave.
struct GivenSettings {
  bool nproc_per_node = false;
  bool nnodes = false;
  bool node_rank = false;
  bool master_addr = false;
  bool master_port = false;
  bool max_restarts = false;
};

// What this machine has for PET_NPROC_PER_NODE's words: "gpu" and "auto"
// count GPUs, "cpu" and "auto" without GPUs count cores.
struct NodeDevices {
  int gpus = 0;
  int cores = 1;
};

// Whether the environment holds node settings for a launcher (any PET_ one of
// the above, or PET_RDZV_BACKEND). `train` without --nproc_per_node then acts
// as the node's launcher, as torchrun would, unless it already is a rank
// (LOCAL_RANK is set: its launcher passed the pod's variables on).
bool HasNodeSettings(const rendezvous::EnvMap& env);

// Fills what `given` leaves out of `options` from `env` (above). Returns the
// variables it took, for the launcher's log ("PET_NNODES=2, PET_NODE_RANK=1,
// ..."; empty when none). kInvalidArgument naming the variable and its value:
// not a number, a bad PET_NNODES, "gpu" without GPUs, an unknown word, a
// dynamic rendezvous; kInvalidArgument also for a pod's RANK without
// WORLD_SIZE or the other way round.
absl::StatusOr<std::string> ApplyNodeEnv(const rendezvous::EnvMap& env,
                                         const GivenSettings& given,
                                         const NodeDevices& devices,
                                         LaunchOptions* options);

// The NVIDIA GPUs this process may use, without loading CUDA:
// CUDA_VISIBLE_DEVICES' entries when it is set (empty, or starting with
// "-1", means none), else the /dev/nvidia<N> device files under `dev` (a
// container sees the GPUs allotted to it).
int VisibleNvidiaGpus(const rendezvous::EnvMap& env,
                      const std::string& dev = "/dev");

}  // namespace dtrain::launch

#endif  // DTRAIN_DIST_LAUNCH_NODE_ENV_H_
