// Launch-environment discovery: which process of the job this is (rank, world
// size, local rank and local world size, which pick the GPU) and where rank
// 0's store listens (master address and port), from the caller's explicit
// arguments and the variables launchers set: torchrun, Open MPI, MPICH/PMI
// and Slurm. InitWorld (init.h) uses it for every init method, so env:// works
// under each of these launchers, not only under torchrun as PyTorch's does.
//
// This is the one module allowed to read environment variables (DESIGN.md),
// and only ProcessEnv() does: everything else takes an EnvMap, so callers
// snapshot the environment once and tests pass plain maps. All functions are
// thread-safe; ProcessEnv() must not race with setenv()/putenv().
#ifndef DTRAIN_DIST_RENDEZVOUS_LAUNCH_ENV_H_
#define DTRAIN_DIST_RENDEZVOUS_LAUNCH_ENV_H_

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/optional.h"
#include "dist/rendezvous/init_method.h"

namespace dtrain::rendezvous {

// Variable name -> value.
using EnvMap = absl::flat_hash_map<std::string, std::string>;

// A copy of this process's environment (`environ`).
EnvMap ProcessEnv();

// PyTorch's default MASTER_PORT.
inline constexpr int kDefaultMasterPort = 29500;
inline constexpr absl::string_view kDefaultMasterAddr = "127.0.0.1";

// Values the caller was given (flags, a config): each set field overrides the
// environment.
struct ExplicitArgs {
  absl::optional<int> rank;
  absl::optional<int> world_size;
  absl::optional<int> local_rank;
  absl::optional<int> local_world_size;
  absl::optional<std::string> master_addr;
  absl::optional<int> master_port;
};

enum class LaunchSource {
  kExplicit,       // rank and world size both from ExplicitArgs
  kTorchrun,       // RANK, WORLD_SIZE, ... (torchrun, or set by hand)
  kKubernetes,     // RANK, WORLD_SIZE per pod (PyTorchJob, Volcano)
  kOpenMpi,        // OMPI_COMM_WORLD_*
  kMpich,          // PMI_RANK, PMI_SIZE (MPICH, Intel MPI and other PMI users)
  kSlurm,          // SLURM_PROCID, SLURM_NTASKS, ... (srun)
  kSingleProcess,  // nothing found: rank 0 of 1
};

// "explicit", "torchrun", "kubernetes", "openmpi", "mpich", "slurm",
// "single process".
absl::string_view LaunchSourceName(LaunchSource source);

struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = std::string(kDefaultMasterAddr);
  int master_port = kDefaultMasterPort;

  // Where rank and world size came from.
  LaunchSource source = LaunchSource::kSingleProcess;
  // Where the master address and port came from, for messages: "explicit",
  // a variable name ("MASTER_ADDR", "SLURM_JOB_NODELIST") or "default" (no
  // source gave it; env:// with more than one rank rejects a default address).
  std::string master_addr_from = "default";
  std::string master_port_from = "default";
  // True when no source gave a local rank or size and they were set to the
  // global ones: right on one node only.
  bool local_inferred = false;

  // GLOO_SOCKET_IFNAME: the network interface Gloo should use, or empty. (NCCL
  // reads its own NCCL_SOCKET_IFNAME.)
  std::string gloo_socket_ifname;

  // Under torchrun with TORCHELASTIC_USE_AGENT_STORE=True (its default mode):
  // the agent serves a c10d store at the master address and port, and no rank
  // may start one there.
  bool agent_store = false;
  // How often the launcher has restarted the group (RestartCount).
  int restart_count = 0;

  absl::string_view source_name() const { return LaunchSourceName(source); }

  // "rank 3 of 8 (local 1 of 4) from slurm, master node01:29500
  // (SLURM_JOB_NODELIST, default)".
  std::string ToString() const;
  // The same without the master, for init methods that do not use it
  // (tcp://, file://): "rank 3 of 8 (local 1 of 4) from slurm".
  std::string PlacementString() const;
};

// Works out this process's place in the job. Each field comes from the first
// of:
//   1. `args`;
//   2. the launcher detected in `env`, the first of
//        torchrun  when RANK or WORLD_SIZE is set,
//        Open MPI  when OMPI_COMM_WORLD_RANK or OMPI_COMM_WORLD_SIZE is set,
//        MPICH/PMI when PMI_RANK or PMI_SIZE is set,
//        Slurm     when SLURM_PROCID is set
//      (so torchrun inside srun, or mpirun inside a Slurm allocation, wins
//      over Slurm);
//   3. a derived or default value.
// Per launcher (rank, world size, local rank, local world size):
//   torchrun  RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE
//   Kubernetes RANK and WORLD_SIZE without LOCAL_RANK or LOCAL_WORLD_SIZE in
//             an operator's pod (OperatorPod below): its per-pod values
//             (Volcano's pytorch plugin, PyTorchJob), the pod running this
//             one process: local rank 0 of 1. Refused when PET_NPROC_PER_NODE
//             is set to anything but 1 (RANK is then the pod's index):
//             `launch` or `train` start those ranks.
//   Open MPI  OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE}
//   MPICH     PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS
//   Slurm     SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, and the local world
//             size from SLURM_STEP_TASKS_PER_NODE or SLURM_TASKS_PER_NODE at
//             index SLURM_NODEID (exact even when nodes run different
//             counts), else SLURM_NTASKS_PER_NODE.
// Without a launcher, rank 0 of 1. The local world size comes from a flag or
// the launch environment: an explicit local rank (the AWS tutorial's
// `--local_rank=N`) whose local world size neither `args` nor the launcher
// gives takes LOCAL_WORLD_SIZE when it is set, and is an error saying to pass
// --local_world_size otherwise. When neither local rank nor local world size
// is known, they equal rank and world size (local_inferred is set): right on
// one node only.
// Master address: args, MASTER_ADDR, under Slurm the first host of
// SLURM_STEP_NODELIST, SLURM_JOB_NODELIST or SLURM_NODELIST (first set one),
// else 127.0.0.1 (master_addr_from "default"). Master port: args,
// MASTER_PORT, else 29500. MPI launchers set no master address: without
// MASTER_ADDR the default 127.0.0.1 is only right on one node, which is why
// InitWorld's env:// refuses it for more than one rank.
// `source` is kExplicit when `args` gives rank and world size, else the
// launcher's; the launcher still supplies the fields `args` leaves out.
//
// A variable overridden by `args` is not read, so a bad value there is not an
// error. kInvalidArgument, naming the variable (or argument) and its value,
// for: a value that is not an integer ("RANK='abc' is not an integer"), a
// launcher that sets only one of rank / world size or of local rank / local
// world size (names the missing variable), one of a pair given in `args` with
// nothing to supply the other (names the flag to pass: "explicit
// local_rank=1 needs local_world_size too: pass --local_world_size ..."),
// world_size < 1 or above base::kMaxWorldSize (2^20), rank outside
// [0, world_size), local_world_size < 1 or > world_size or (when a flag or
// launcher gave it) above the processes this machine runs
// (base::ProcessLimit), local_rank outside
// [0, local_world_size), a port outside 1..65535, an empty MASTER_ADDR, a bad
// Slurm node or tasks-per-node list.
absl::StatusOr<LaunchEnv> DiscoverLaunchEnv(const EnvMap& env,
                                            const ExplicitArgs& args);

// Whether this process runs in a Kubernetes operator's pod: the kubelet's
// KUBERNETES_SERVICE_HOST (every pod) and an operator's mark: torchrun's PET_*
// variables (Kubeflow's operators) or Volcano's VC_TASK_INDEX. A pod with
// RANK and WORLD_SIZE set by hand (a development pod) is not one.
bool OperatorPod(const EnvMap& env);

// Whether a launcher started this process as one of its ranks: torchrun's
// and the project's LOCAL_RANK or LOCAL_WORLD_SIZE, Open MPI's
// OMPI_COMM_WORLD_RANK, MPICH's PMI_RANK, Slurm's SLURM_PROCID. An operator's
// per-pod RANK does not count: the pod may still run a launcher.
bool LaunchedAsRank(const EnvMap& env);

// The job's store token (docs/RELIABILITY.md): DTRAIN_STORE_TOKEN, else the
// contents of the file DTRAIN_STORE_TOKEN_FILE names (one trailing newline
// dropped), else empty (no token). Never a command-line argument, which other
// users of the host can read in /proc. kInvalidArgument when both are set or
// the token is empty; kNotFound/kPermissionDenied naming an unreadable file.
absl::StatusOr<std::string> StoreToken(const EnvMap& env);

// How often a launcher has restarted this process's group: the project's
// launcher's DTRAIN_RESTART_COUNT, else torchrun's TORCHELASTIC_RESTART_COUNT,
// else 0. kInvalidArgument naming the variable for a value that is not a
// natural number.
absl::StatusOr<int> RestartCount(const EnvMap& env);

// Folds an init method's query parameters (?rank=R&world_size=N) into `args`.
// kInvalidArgument when both give a different value for the same field.
absl::StatusOr<ExplicitArgs> MergeQueryArgs(const ExplicitArgs& args,
                                            const InitMethod& method);

}  // namespace dtrain::rendezvous

#endif  // DTRAIN_DIST_RENDEZVOUS_LAUNCH_ENV_H_
