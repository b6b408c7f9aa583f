// train: the tutorials' data-parallel training in one C++ binary.
//
//   train                                   # ConvNet, Fashion-MNIST, 1 process
//   train --nproc_per_node=4 --batch_size=32     # 4 local processes (spawned)
//   launch --nproc_per_node=2 -- train      # under our launcher (or torchrun,
//                                           # srun, mpirun: env:// finds them)
//   train --model=resnet18 --dataset=stl10 --data_dir=/data/stl10
//         --dist_backend=nccl --device=cuda --nproc_per_node=8
//   train --model=resnet18 --dataset=imagefolder --data_dir=/data/pets
//         --workers=4 --nproc_per_node=2   # /data/pets/{train,val}/<class>/
//   train --checkpoint_dir=/ckpt --resume   # a Kubernetes operator's pod: the
//                                           # node's launcher from PET_* (as
//                                           # torchrun), or one rank per pod
//
// Built as //trainer:train, and as the train_main library that a user's own
// binary links together with its own registered models (docs/OWN_MODEL.md).
//
// Exit status: 0 when training finished, 1 when it failed (the message says
// which rank and why), 2 for bad flags, 128 + N when signal N (SIGINT,
// SIGTERM) stopped it after rank 0 saved a checkpoint at a step boundary.

#include <signal.h>
#include <torch/cuda.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/machine_limits.h"
#include "base/malloc_tuning.h"
#include "base/open_file_limit.h"
#include "base/status_macros.h"
#include "dist/backend/device_choice.h"
#include "dist/backend/device_selection.h"
#include "dist/backend/process_group.h"
#include "dist/launch/launcher.h"
#include "dist/launch/node_env.h"
#include "dist/rendezvous/init.h"
#include "dist/rendezvous/init_method.h"
#include "dist/rendezvous/launch_env.h"
#include "dist/store/failover_store.h"
#include "trainer/elastic_run.h"
#include "trainer/flags/train_flags.h"
#include "trainer/flight_dump.h"
#include "trainer/train_options.h"
#include "trainer/trainer.h"

namespace dtrain::trainer {
namespace {

// Set by the first SIGINT or SIGTERM: the ranks stop together at the next
// step boundary after rank 0 saved a checkpoint. A second signal ends the
// process at once (the handler resets itself).
std::atomic<bool> g_stop_requested{false};
std::atomic<int> g_stop_signal{0};

void OnStopSignal(int signal) {
  g_stop_signal.store(signal);
  g_stop_requested.store(true);
}

void InstallStopHandlers() {
  struct sigaction action = {};
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESETHAND;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

// The arguments for the spawned ranks: ours without the spawning flags, in
// both "--flag=value" and "--flag value" forms.
std::vector<std::string> ChildArguments(int argc, char** argv) {
  std::vector<std::string> out = {"/proc/self/exe"};
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) out[0].assign(self, static_cast<size_t>(n));
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    bool drop = false;
    for (const std::string& name : SpawnFlagNames()) {
      for (const std::string& prefix :
           {absl::StrCat("--", name), absl::StrCat("-", name)}) {
        if (arg == prefix) {
          drop = true;
          ++i;  // its value follows
        } else if (absl::StartsWith(arg, prefix + "=")) {
          drop = true;
        }
        if (drop) break;
      }
      if (drop) break;
    }
    if (!drop) out.push_back(arg);
  }
  return out;
}

// What the spawned group is: the flags, and what they leave out from torchrun's
// PET_* variables or an operator's pod (dist/launch/node_env.h).
absl::StatusOr<launch::LaunchOptions> SpawnOptions(
    int argc, char** argv, const SpawnFlags& spawn,
    const LaunchOptions& options, const rendezvous::EnvMap& env) {
  launch::LaunchOptions l;
  l.nproc_per_node = spawn.nproc_per_node > 0 ? spawn.nproc_per_node : 1;
  l.nnodes = spawn.nnodes;
  l.max_nnodes = spawn.max_nnodes;
  l.node_rank = spawn.node_rank;
  if (options.master_addr) l.master_addr = *options.master_addr;
  if (options.master_port) l.master_port = *options.master_port;
  l.max_restarts = spawn.max_restarts;
  // train --elastic spawns an elastic group.
  l.elastic = options.elastic;
  l.failure_grace = spawn.failure_grace;
  l.command = ChildArguments(argc, argv);
  launch::GivenSettings given;
  given.nproc_per_node = spawn.nproc_per_node > 0;
  given.nnodes = Specified("nnodes");
  given.node_rank = Specified("node_rank");
  given.master_addr = options.master_addr.has_value();
  given.master_port = options.master_port.has_value();
  given.max_restarts = Specified("max_restarts");
  DTRAIN_ASSIGN_OR_RETURN(
      const std::string from_env,
      launch::ApplyNodeEnv(
          env, given, {launch::VisibleNvidiaGpus(env), base::UsableCores()},
          &l));
  if (!from_env.empty())
    std::cerr << "train: from the environment: " << from_env << "\n";
  return l;
}

int Spawn(const launch::LaunchOptions& l) {
  absl::StatusOr<launch::LaunchResult> result = launch::Run(l, std::cerr);
  if (!result.ok()) {
    std::cerr << "train: " << result.status().message() << "\n";
    return 2;
  }
  return result->exit_code;
}

// The context of this process's training: stop signals handled, the log on
// stderr.
TrainContext ProcessContext(absl::Time start) {
  InstallStopHandlers();
  TrainContext context;
  context.stop_requested = &g_stop_requested;
  context.log = &std::cerr;
  context.log_is_terminal = ::isatty(STDERR_FILENO) == 1;
  context.start = start;
  return context;
}

// The process's exit status for training's result, which it reports.
int ExitStatus(const absl::Status& s) {
  if (s.ok()) return 0;
  std::cerr << "train: " << s.message() << "\n";
  DumpFlightRecorderOnFailure(s);
  // Stopped as asked: the shell's convention for death by that signal.
  if (absl::IsCancelled(s) && g_stop_signal.load() != 0)
    return 128 + g_stop_signal.load();
  return 1;
}

// An elastic rank's settings: its standby store where the other hosts reach
// it (this machine's address on the route to the first store), the job's
// token, the backend every generation creates.
absl::StatusOr<ElasticOptions> Elastic(const TrainOptions& options,
                                       const rendezvous::LaunchEnv& launch,
                                       const backend::BackendConfig& backend) {
  ElasticOptions elastic;
  elastic.min_ranks = options.launch.min_ranks;
  elastic.max_ranks = options.launch.max_ranks;
  // The launcher's --nnodes=MIN:MAX, in ranks, unless the flags say.
  for (auto [name, variable, value] :
       {std::tuple<const char*, const char*, int*>{
            "min_ranks", "DTRAIN_ELASTIC_MIN_RANKS", &elastic.min_ranks},
        {"max_ranks", "DTRAIN_ELASTIC_MAX_RANKS", &elastic.max_ranks}}) {
    const char* text = std::getenv(variable);
    if (text == nullptr || Specified(name)) continue;
    if (!absl::SimpleAtoi(text, value) || *value < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(variable, "='", text, "' is not a number of ranks"));
    }
  }
  elastic.backend = backend;
  // A process that joins made no process group, which would have read it.
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
      ifname != nullptr && elastic.backend.gloo_iface.empty()) {
    elastic.backend.gloo_iface = ifname;
  }
  std::string master = launch.master_addr;
  int master_port = launch.master_port;
  if (absl::StatusOr<rendezvous::InitMethod> method =
          rendezvous::ParseInitMethod(options.launch.dist_url);
      method.ok() && method->scheme == rendezvous::InitMethod::kTcp) {
    master = method->host;
    master_port = method->port;
  } else if (method.ok() && method->scheme == rendezvous::InitMethod::kFile) {
    master.clear();
  }
  DTRAIN_ASSIGN_OR_RETURN(elastic.standby_host,
                          store::StandbyHostToward(master, master_port));
  absl::StatusOr<std::string> token =
      rendezvous::StoreToken(rendezvous::ProcessEnv());
  if (token.ok()) elastic.token = *token;
  // Under the project's launcher with --elastic.
  if (const char* dir = std::getenv("DTRAIN_ELASTIC_DIR"))
    elastic.addresses_dir = dir;
  return elastic;
}

// A joining process's CUDA device (-1 for the CPU), chosen and made current
// before any backend exists, as a first-generation rank's is: --device=cuda:N,
// or for "cuda" its local rank (--local_rank, or the launcher's LOCAL_RANK: a
// replacement takes its failed rank's), cuda:0 where neither says. Its
// backends are created on it. Only the local placement is read: a joiner's
// RANK and WORLD_SIZE are the launcher's placeholders.
absl::StatusOr<int> JoinerCudaDevice(const TrainOptions& options,
                                     backend::BackendConfig* config) {
  if (options.launch.device == "cpu") return -1;
  backend::RankPlacement placement;
  placement.local_inferred = true;
  for (auto [flag, variable, value, out] :
       {std::tuple<absl::optional<int>, const char*, int, int*>{
            options.launch.local_rank, "LOCAL_RANK", 0, &placement.local_rank},
        {options.launch.local_world_size, "LOCAL_WORLD_SIZE", 1,
         &placement.local_world_size}}) {
    *out = value;
    if (flag.has_value()) {
      *out = *flag;
      placement.local_inferred = false;
    } else if (const char* text = std::getenv(variable);
               text != nullptr && *text != '\0') {
      if (!absl::SimpleAtoi(text, out) || *out < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(variable, "='", text, "' is not a number"));
      }
      placement.local_inferred = false;
    }
  }
  placement.local_world_size =
      std::max(placement.local_world_size, placement.local_rank + 1);
  placement.rank = placement.local_rank;
  placement.world_size = placement.local_world_size;
  DTRAIN_ASSIGN_OR_RETURN(
      const int device,
      backend::SelectCudaDevice(options.launch.device, placement));
  config->cuda_device = std::max(0, device);
  return device;
}

// A process the launcher started to join an elastic job (DTRAIN_ELASTIC_JOIN
// =1): a replacement for a failed rank joins through the standby stores the
// job left in DTRAIN_ELASTIC_DIR; a node that joins (none of the job's
// ranks ran under its launcher) through the job's first store, MASTER_ADDR
// and MASTER_PORT. Returns the exit status.
int Replace(const TrainOptions& options, const rendezvous::LaunchEnv& launch,
            backend::BackendConfig config, absl::Time start) {
  absl::StatusOr<int> device = JoinerCudaDevice(options, &config);
  if (!device.ok()) {
    std::cerr << "train: joining: " << device.status().message() << "\n";
    return 1;
  }
  absl::StatusOr<ElasticOptions> elastic = Elastic(options, launch, config);
  if (!elastic.ok()) {
    std::cerr << "train: --elastic: " << elastic.status().message() << "\n";
    return 1;
  }
  if (elastic->addresses_dir.empty()) {
    std::cerr << "train: DTRAIN_ELASTIC_JOIN is set without "
                 "DTRAIN_ELASTIC_DIR: the launcher says where the job is\n";
    return 2;
  }
  absl::StatusOr<std::vector<store::StoreEndpoint>> standbys =
      ReadStandbys(elastic->addresses_dir);
  TrainContext context = ProcessContext(start);
  context.cuda_device = *device;
  if (absl::IsNotFound(standbys.status())) {
    // No rank of the job's first generation ran under this launcher: a node
    // that joins (--nnodes=MIN:MAX) finds the job through its first store.
    return ExitStatus(JoinElastic(options,
                                  {launch.master_addr, launch.master_port},
                                  context, *elastic)
                          .status());
  }
  if (!standbys.ok()) {
    std::cerr << "train: joining as a replacement: "
              << standbys.status().message() << "\n";
    return 1;
  }
  absl::StatusOr<TrainResult> result = JoinElasticThroughStandbys(
      options, *std::move(standbys), context, *elastic);
  return ExitStatus(result.status());
}

// --join: this process joins a running elastic job instead of meeting a
// first generation. Returns the exit status.
int Join(const TrainOptions& options, backend::BackendConfig config,
         absl::Time start) {
  absl::StatusOr<rendezvous::InitMethod> method =
      rendezvous::ParseInitMethod(options.launch.dist_url);
  if (!method.ok() || method->scheme != rendezvous::InitMethod::kTcp ||
      method->port == 0) {
    std::cerr << "train: --join needs --dist_url=tcp://HOST:PORT, the job's "
                 "first store (its ranks' --dist_url)\n";
    return 2;
  }
  for (const char* name : {"rank", "world_size", "nproc_per_node"}) {
    if (Specified(name)) {
      std::cerr << "train: --join takes no --" << name
                << ": the job gives this process its rank\n";
      return 2;
    }
  }
  absl::StatusOr<int> device = JoinerCudaDevice(options, &config);
  if (!device.ok()) {
    std::cerr << "train: --join: " << device.status().message() << "\n";
    return 1;
  }
  rendezvous::LaunchEnv launch;
  launch.master_addr = method->host;
  launch.master_port = method->port;
  absl::StatusOr<ElasticOptions> elastic = Elastic(options, launch, config);
  if (!elastic.ok()) {
    std::cerr << "train: --join: " << elastic.status().message() << "\n";
    return 1;
  }
  TrainContext context = ProcessContext(start);
  context.cuda_device = *device;
  absl::StatusOr<TrainResult> result =
      JoinElastic(options, {method->host, method->port}, context, *elastic);
  return ExitStatus(result.status());
}

int Main(int argc, char** argv) {
  const absl::Time start = absl::Now();
  base::TuneMallocForTraining();
  absl::SetProgramUsageMessage(
      "train [flags]: data-parallel training of the tutorials' models (see "
      "--help for the flags)");
  SetTrainFlagsUsage();
  RecordGivenFlags(argc, argv);
  absl::ParseCommandLine(argc, argv);
  if (absl::Status st = ApplyFlightRecorderFlag(); !st.ok()) {
    std::cerr << "train: " << st.message() << "\n";
    return 2;
  }
  base::RaiseOpenFileLimitOrWarn("train");
  InstallFlightDump(FlightRecorderDir());
  if (PrintCudaDevicesRequested()) {
    std::cout << (torch::cuda::is_available() ? torch::cuda::device_count() : 0)
              << "\n";
    return 0;
  }
  absl::StatusOr<TrainOptions> options = OptionsFromFlags();
  if (!options.ok()) {
    std::cerr << "train: " << options.status().message() << "\n";
    return 2;
  }
  const SpawnFlags spawn = ReadSpawnFlags();
  const rendezvous::EnvMap env = rendezvous::ProcessEnv();
  // With torchrun's node variables (a Kubernetes operator's pod) and no
  // launcher above it, train is the node's launcher, as torchrun would be,
  // unless its flags make it one rank.
  if (spawn.nproc_per_node > 0 && env.contains("LOCAL_RANK")) {
    std::cerr << "train: --nproc_per_node in a rank a launcher started "
                 "(LOCAL_RANK is set): a rank does not spawn ranks (is "
                 "--nproc_per_node in a --flagfile the launcher passed on?)\n";
    return 2;
  }
  const absl::StatusOr<rendezvous::InitMethod> url =
      rendezvous::ParseInitMethod(options->launch.dist_url);
  const bool one_rank =
      options->launch.rank.has_value() ||
      options->launch.world_size.has_value() ||
      options->launch.local_rank.has_value() || options->launch.join ||
      (url.ok() && (url->rank.has_value() || url->world_size.has_value()));
  if (spawn.nproc_per_node > 0 ||
      (!one_rank && !rendezvous::LaunchedAsRank(env) &&
       launch::HasNodeSettings(env))) {
    absl::StatusOr<launch::LaunchOptions> group =
        SpawnOptions(argc, argv, spawn, options->launch, env);
    if (!group.ok()) {
      std::cerr << "train: " << group.status().message() << "\n";
      return 2;
    }
    // Rank 0 runs on node 0: its outputs are checked before any process
    // starts (each rank checks its own again).
    if (group->node_rank == 0) {
      if (absl::Status s = CheckOutputPaths(*options, 0); !s.ok()) {
        std::cerr << "train: " << s.message() << "\n";
        return 2;
      }
    }
    return Spawn(*group);
  }
  for (const char* name : {"nnodes", "node_rank", "max_restarts"}) {
    if (Specified(name)) {
      std::cerr << "train: --" << name
                << " needs --nproc_per_node (this process is one rank)\n";
      return 2;
    }
  }

  // The rendezvous, this rank's CUDA device (made current before the
  // backend: NCCL creates its context on the current device), the backend.
  backend::ProcessGroupOptions group_options;
  rendezvous::InitOptions& init = group_options.init;
  init.url = options->launch.dist_url;
  init.timeout = options->launch.timeout;
  init.args.rank = options->launch.rank;
  init.args.world_size = options->launch.world_size;
  init.args.local_rank = options->launch.local_rank;
  init.args.local_world_size = options->launch.local_world_size;
  init.args.master_addr = options->launch.master_addr;
  init.args.master_port = options->launch.master_port;
  init.bind_host = options->launch.store_bind;
  group_options.backend.name = options->launch.dist_backend;
  group_options.backend.shm = options->launch.shm;
  group_options.backend.stall_warning = options->launch.stall_warning;
  group_options.timeout = options->launch.timeout;
  group_options.device = options->launch.device;
  // The master only where env:// used it; tcp:// and file:// name their
  // store below.
  const bool env_master =
      init.url.empty() || absl::StartsWith(init.url, "env://");
  group_options.on_rendezvous = [env_master](const rendezvous::World& world) {
    if (world.rank == 0 && world.world_size > 1) {
      std::cerr << "train: "
                << (env_master ? world.launch.ToString()
                               : world.launch.PlacementString())
                << "; store " << world.store->Describe() << "\n";
    }
  };
  if (options->launch.join) return Join(*options, group_options.backend, start);
  if (options->launch.elastic &&
      std::getenv("DTRAIN_ELASTIC_JOIN") != nullptr &&
      std::string(std::getenv("DTRAIN_ELASTIC_JOIN")) == "1") {
    // Its RANK and WORLD_SIZE are the launcher's placeholders: the job gives
    // it a rank. Only the job's first store matters.
    rendezvous::LaunchEnv env;
    const char* addr = std::getenv("MASTER_ADDR");
    const char* port = std::getenv("MASTER_PORT");
    if (addr == nullptr || *addr == '\0' || port == nullptr ||
        !absl::SimpleAtoi(port, &env.master_port)) {
      std::cerr << "train: a process the launcher starts to join "
                   "(DTRAIN_ELASTIC_JOIN=1) needs MASTER_ADDR and MASTER_PORT, "
                   "the job's first store\n";
      return 2;
    }
    env.master_addr = addr;
    return Replace(*options, env, group_options.backend, start);
  }
  // Errors after the rendezvous start with "[rank R]".
  absl::StatusOr<backend::ProcessGroup> group =
      backend::InitProcessGroup(group_options, rendezvous::ProcessEnv());
  if (!group.ok()) {
    std::cerr << "train: " << group.status().message() << "\n";
    return 1;
  }
  SetFlightRank(group->world.rank, group->world.world_size);
  TrainContext context = ProcessContext(start);
  context.cuda_device = group->cuda_device;
  absl::StatusOr<TrainResult> result;
  if (options->launch.elastic) {
    absl::StatusOr<ElasticOptions> elastic =
        Elastic(*options, group->world.launch, group->backend_config);
    if (!elastic.ok()) {
      std::cerr << "train: --elastic: " << elastic.status().message() << "\n";
      return 1;
    }
    result = TrainElastic(*options, group->world, *group->backend, context,
                          *elastic);
  } else {
    result = Train(*options, group->world, *group->backend, context);
  }
  if (!result.ok()) {
    // Peers blocked on this rank learn of the failure now, and destroying
    // the backend does not wait for them (Gloo's exit otherwise waits).
    group->backend->Abort(result.status());
  }
  return ExitStatus(result.status());
}

}  // namespace
}  // namespace dtrain::trainer

int main(int argc, char** argv) { return dtrain::trainer::Main(argc, argv); }
