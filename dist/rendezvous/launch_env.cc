#include "dist/rendezvous/launch_env.h"

#include <unistd.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/atomic_file.h"
#include "base/machine_limits.h"
#include "base/status_macros.h"
#include "dist/rendezvous/slurm_nodelist.h"

extern char** environ;

namespace dtrain::rendezvous {
namespace {

// An integer setting and how to name it in an error: "RANK=3",
// "explicit rank=3", "local world size 2 (SLURM_TASKS_PER_NODE='2(x2)' at
// SLURM_NODEID=1)". Errors about two settings ("rank >= world size") then
// name both and where each came from.
struct Setting {
  int value = 0;
  std::string what;
};

struct Settings {
  Setting rank;
  Setting world_size;
  Setting local_rank;
  Setting local_world_size;
  bool local_inferred = false;
};

// The variables one launcher sets.
struct Launcher {
  LaunchSource source;
  const char* label;  // for "<label> environment is incomplete"
  const char* rank;
  const char* world_size;
  const char* local_rank;
  const char* local_world_size;  // nullptr: derived (Slurm)
  // Whether world_size alone marks the launcher as present. SLURM_NTASKS is
  // also set in salloc shells, which are not tasks of a step.
  bool world_size_marks;
};

// In order of precedence: a launcher started inside another's allocation
// (torchrun under srun, mpirun in a Slurm job) is the one that counts.
constexpr Launcher kLaunchers[] = {
    {LaunchSource::kTorchrun, "torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK",
     "LOCAL_WORLD_SIZE", true},
    {LaunchSource::kOpenMpi, "Open MPI", "OMPI_COMM_WORLD_RANK",
     "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE", true},
    {LaunchSource::kMpich, "MPICH/PMI", "PMI_RANK", "PMI_SIZE",
     "MPI_LOCALRANKID", "MPI_LOCALNRANKS", true},
    {LaunchSource::kSlurm, "Slurm", "SLURM_PROCID", "SLURM_NTASKS",
     "SLURM_LOCALID", nullptr, false},
};

// torchrun's variables as an operator sets them in a pod, per pod.
constexpr Launcher kKubernetesPod = {LaunchSource::kKubernetes,
                                     "Kubernetes operator",
                                     "RANK",
                                     "WORLD_SIZE",
                                     "LOCAL_RANK",
                                     "LOCAL_WORLD_SIZE",
                                     true};

constexpr const char* kSlurmLocalWorldSizeVars =
    "SLURM_STEP_TASKS_PER_NODE or SLURM_TASKS_PER_NODE (with SLURM_NODEID), "
    "or SLURM_NTASKS_PER_NODE";

constexpr const char* kSlurmNodeListVars[] = {
    "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"};

const std::string* Find(const EnvMap& env, absl::string_view name) {
  auto it = env.find(name);
  return it == env.end() ? nullptr : &it->second;
}

bool Present(const EnvMap& env, const Launcher& launcher) {
  return Find(env, launcher.rank) != nullptr ||
         (launcher.world_size_marks &&
          Find(env, launcher.world_size) != nullptr);
}

// The first launcher present, in order of precedence; nullptr when none is.
// torchrun's variables without a local rank, in an operator's pod, are the
// operator's.
const Launcher* DetectLauncher(const EnvMap& env) {
  for (const Launcher& launcher : kLaunchers) {
    if (!Present(env, launcher)) continue;
    if (launcher.source == LaunchSource::kTorchrun && OperatorPod(env) &&
        Find(env, "LOCAL_RANK") == nullptr &&
        Find(env, "LOCAL_WORLD_SIZE") == nullptr) {
      return &kKubernetesPod;
    }
    return &launcher;
  }
  return nullptr;
}

absl::StatusOr<int> ParseInt(absl::string_view name, absl::string_view text) {
  absl::string_view digits = text;
  absl::ConsumePrefix(&digits, "-");
  bool all_digits = !digits.empty();
  for (char c : digits) {
    all_digits =
        all_digits && absl::ascii_isdigit(static_cast<unsigned char>(c));
  }
  if (!all_digits) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, "='", text, "' is not an integer"));
  }
  int value = 0;
  if (!absl::SimpleAtoi(text, &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, "='", text, "' is out of range for an int"));
  }
  return value;
}

// The variable as a Setting; nullopt when it is not set.
absl::StatusOr<absl::optional<Setting>> ReadInt(const EnvMap& env,
                                                const char* name) {
  const std::string* text = Find(env, name);
  if (text == nullptr) return absl::optional<Setting>();
  DTRAIN_ASSIGN_OR_RETURN(const int value, ParseInt(name, *text));
  return absl::optional<Setting>(
      Setting{value, absl::StrCat(name, "=", value)});
}

Setting FromArg(int value, absl::string_view name) {
  return Setting{value, absl::StrCat("explicit ", name, "=", value)};
}

// The argument when set (the variable is then not read, so a bad value there
// does not matter), else the variable; nullopt when neither is set.
absl::StatusOr<absl::optional<Setting>> Pick(const absl::optional<int>& arg,
                                             absl::string_view arg_name,
                                             const EnvMap& env,
                                             const char* var) {
  if (arg.has_value()) return absl::optional<Setting>(FromArg(*arg, arg_name));
  if (var == nullptr) return absl::optional<Setting>();
  return ReadInt(env, var);
}

// One of a pair that must come together is missing. `missing_arg` is also
// the flag of //trainer:train and //tools:rendezvous_probe that supplies it;
// `or_else` names another way to supply it, if any.
absl::Status Incomplete(const Launcher* launcher, absl::string_view missing_var,
                        absl::string_view missing_arg, const Setting& present,
                        bool present_explicit, absl::string_view or_else = "") {
  if (launcher != nullptr && !present_explicit) {
    return absl::InvalidArgumentError(absl::StrCat(
        launcher->label, " environment is incomplete: ", missing_var,
        " is not set, though ", present.what, " is"));
  }
  const std::string source =
      launcher == nullptr
          ? std::string(
                "no launcher environment (torchrun, Open MPI, MPICH, "
                "Slurm) supplies it")
          : absl::StrCat("the ", launcher->label,
                         " environment does not supply it (", missing_var,
                         " is not set)");
  return absl::InvalidArgumentError(
      absl::StrCat(present.what, " needs ", missing_arg, " too: pass --",
                   missing_arg, or_else, "; ", source));
}

// Under Slurm the tasks-per-node list at this node's index is exact even when
// nodes run different numbers of tasks; SLURM_NTASKS_PER_NODE (only set when
// the job asked for --ntasks-per-node) is a maximum.
absl::StatusOr<absl::optional<Setting>> SlurmLocalWorldSize(const EnvMap& env) {
  const std::string* node_id_text = Find(env, "SLURM_NODEID");
  for (const char* var :
       {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}) {
    const std::string* spec = Find(env, var);
    if (spec == nullptr || node_id_text == nullptr) continue;
    DTRAIN_ASSIGN_OR_RETURN(const int node_id,
                            ParseInt("SLURM_NODEID", *node_id_text));
    absl::StatusOr<std::vector<int>> counts = ExpandSlurmTasksPerNode(*spec);
    if (!counts.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(var, ": ", counts.status().message()));
    }
    if (node_id < 0 || static_cast<size_t>(node_id) >= counts->size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("SLURM_NODEID=", node_id, " is outside ", var, "='",
                       *spec, "', which lists ", counts->size(), " nodes"));
    }
    const int count = (*counts)[node_id];
    return absl::optional<Setting>(Setting{
        count, absl::StrCat("local world size ", count, " (", var, "='", *spec,
                            "' at SLURM_NODEID=", node_id, ")")});
  }
  return ReadInt(env, "SLURM_NTASKS_PER_NODE");
}

// Local rank and size come together; when neither is known this is taken to
// be a one-node job. `explicit_local_rank`: the local rank came from
// ExplicitArgs.
absl::Status ResolveLocal(const absl::optional<Setting>& local_rank,
                          const absl::optional<Setting>& local_world_size,
                          const Launcher* launcher, bool explicit_local_rank,
                          bool explicit_local_world_size, Settings* out) {
  if (local_rank.has_value() && local_world_size.has_value()) {
    out->local_rank = *local_rank;
    out->local_world_size = *local_world_size;
    return absl::OkStatus();
  }
  if (local_rank.has_value()) {
    const char* var = "";
    if (launcher != nullptr) {
      var = launcher->local_world_size != nullptr ? launcher->local_world_size
                                                  : kSlurmLocalWorldSizeVars;
    }
    return Incomplete(launcher, var, "local_world_size", *local_rank,
                      explicit_local_rank,
                      " (the number of ranks on this node) or set "
                      "LOCAL_WORLD_SIZE");
  }
  if (local_world_size.has_value()) {
    return Incomplete(launcher, launcher == nullptr ? "" : launcher->local_rank,
                      "local_rank", *local_world_size,
                      explicit_local_world_size);
  }
  if (launcher != nullptr && launcher->source == LaunchSource::kKubernetes) {
    out->local_rank = Setting{0, "local rank 0 (one process in this pod)"};
    out->local_world_size =
        Setting{1, "local world size 1 (one process in this pod)"};
    return absl::OkStatus();
  }
  out->local_rank = Setting{out->rank.value, "local rank (= rank)"};
  out->local_world_size =
      Setting{out->world_size.value, "local world size (= world size)"};
  out->local_inferred = true;
  return absl::OkStatus();
}

absl::Status Validate(const Settings& s) {
  const auto error = [](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat(parts...));
  };
  if (s.world_size.value < 1) return error(s.world_size.what, " is below 1");
  // Bounds the per-rank work of the rendezvous and the backends.
  const base::Limit world = base::WorldSizeLimit();
  if (s.world_size.value > world.max) {
    return error(s.world_size.what, ": at most ", world.max, " (", world.why,
                 ")");
  }
  if (s.rank.value < 0) return error(s.rank.what, " is negative");
  if (s.rank.value >= s.world_size.value) {
    return error(s.rank.what, " is not less than ", s.world_size.what);
  }
  if (s.local_world_size.value < 1) {
    return error(s.local_world_size.what, " is below 1");
  }
  if (s.local_world_size.value > s.world_size.value) {
    return error(s.local_world_size.what, " is greater than ",
                 s.world_size.what);
  }
  // Ranks on this node are processes here (not bounded by this task's
  // cores: a launcher may bind each rank to one). An inferred local world
  // size is the world size, which may span many nodes.
  const base::Limit processes = base::ProcessLimit();
  if (!s.local_inferred && s.local_world_size.value > processes.max) {
    return error(s.local_world_size.what, ": at most ", processes.max,
                 " processes run on this machine (", processes.why, ")");
  }
  if (s.local_rank.value < 0) return error(s.local_rank.what, " is negative");
  if (s.local_rank.value >= s.local_world_size.value) {
    return error(s.local_rank.what, " is not less than ",
                 s.local_world_size.what);
  }
  return absl::OkStatus();
}

absl::Status CheckPort(const Setting& port) {
  if (port.value < 1 || port.value > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat(port.what, " is outside 1..65535"));
  }
  return absl::OkStatus();
}

// Master address from the argument or MASTER_ADDR; false when neither is set.
absl::StatusOr<bool> ExplicitOrEnvMasterAddr(const EnvMap& env,
                                             const ExplicitArgs& args,
                                             LaunchEnv* out) {
  if (args.master_addr.has_value()) {
    if (args.master_addr->empty()) {
      return absl::InvalidArgumentError("explicit master_addr is empty");
    }
    out->master_addr = *args.master_addr;
    out->master_addr_from = "explicit";
    return true;
  }
  if (const std::string* addr = Find(env, "MASTER_ADDR")) {
    if (addr->empty()) {
      return absl::InvalidArgumentError("MASTER_ADDR is set but empty");
    }
    out->master_addr = *addr;
    out->master_addr_from = "MASTER_ADDR";
    return true;
  }
  return false;
}

// Master port from the argument or MASTER_PORT; `out` keeps the default when
// neither is set.
absl::Status ExplicitOrEnvMasterPort(const EnvMap& env,
                                     const ExplicitArgs& args, LaunchEnv* out) {
  DTRAIN_ASSIGN_OR_RETURN(
      const absl::optional<Setting> port,
      Pick(args.master_port, "master_port", env, "MASTER_PORT"));
  if (!port.has_value()) return absl::OkStatus();
  DTRAIN_RETURN_IF_ERROR(CheckPort(*port));
  out->master_port = port->value;
  out->master_port_from =
      args.master_port.has_value() ? "explicit" : "MASTER_PORT";
  return absl::OkStatus();
}

// Rank 0 of an srun step runs on the step's first node.
absl::Status SlurmMasterAddr(const EnvMap& env, LaunchEnv* out) {
  for (const char* var : kSlurmNodeListVars) {
    const std::string* list = Find(env, var);
    if (list == nullptr) continue;
    absl::StatusOr<std::vector<std::string>> hosts = ExpandSlurmNodeList(*list);
    if (!hosts.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(var, ": ", hosts.status().message()));
    }
    out->master_addr = hosts->front();
    out->master_addr_from = var;
    return absl::OkStatus();
  }
  return absl::OkStatus();
}

void Fill(const Settings& s, LaunchEnv* out) {
  out->rank = s.rank.value;
  out->world_size = s.world_size.value;
  out->local_rank = s.local_rank.value;
  out->local_world_size = s.local_world_size.value;
  out->local_inferred = s.local_inferred;
}

}  // namespace

EnvMap ProcessEnv() {
  EnvMap env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const absl::string_view text(*entry);
    const size_t eq = text.find('=');
    if (eq == absl::string_view::npos || eq == 0) continue;
    // First one wins on duplicate names, as with getenv().
    env.try_emplace(std::string(text.substr(0, eq)),
                    std::string(text.substr(eq + 1)));
  }
  return env;
}

absl::string_view LaunchSourceName(LaunchSource source) {
  switch (source) {
    case LaunchSource::kExplicit:
      return "explicit";
    case LaunchSource::kTorchrun:
      return "torchrun";
    case LaunchSource::kKubernetes:
      return "kubernetes";
    case LaunchSource::kOpenMpi:
      return "openmpi";
    case LaunchSource::kMpich:
      return "mpich";
    case LaunchSource::kSlurm:
      return "slurm";
    case LaunchSource::kSingleProcess:
      return "single process";
  }
  return "unknown";
}

std::string LaunchEnv::PlacementString() const {
  return absl::StrCat("rank ", rank, " of ", world_size, " (local ", local_rank,
                      " of ", local_world_size,
                      local_inferred ? ", assuming one node" : "", ") from ",
                      source_name());
}

std::string LaunchEnv::ToString() const {
  const bool ipv6 = master_addr.find(':') != std::string::npos;
  return absl::StrCat(PlacementString(), ", master ", ipv6 ? "[" : "",
                      master_addr, ipv6 ? "]" : "", ":", master_port, " (",
                      master_addr_from, ", ", master_port_from, ")");
}

absl::StatusOr<LaunchEnv> DiscoverLaunchEnv(const EnvMap& env,
                                            const ExplicitArgs& args) {
  const Launcher* launcher = DetectLauncher(env);
  if (launcher != nullptr && launcher->source == LaunchSource::kKubernetes &&
      !(args.rank.has_value() && args.world_size.has_value())) {
    // PyTorchJob's RANK is then the pod's index, and torchrun's job.
    const std::string* nproc = Find(env, "PET_NPROC_PER_NODE");
    int procs = 0;
    if (nproc != nullptr && !(absl::SimpleAtoi(*nproc, &procs) && procs == 1)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "this pod's RANK and WORLD_SIZE are its operator's, and "
          "PET_NPROC_PER_NODE='",
          *nproc,
          "' asks for a launcher to start the pod's ranks: start them with "
          "`train` or `launch -- PROGRAM`, which read PET_* as torchrun does"));
    }
  }
  DTRAIN_ASSIGN_OR_RETURN(
      const absl::optional<Setting> rank,
      Pick(args.rank, "rank", env, launcher ? launcher->rank : nullptr));
  DTRAIN_ASSIGN_OR_RETURN(const absl::optional<Setting> world_size,
                          Pick(args.world_size, "world_size", env,
                               launcher ? launcher->world_size : nullptr));

  Settings s;
  if (rank.has_value() && world_size.has_value()) {
    s.rank = *rank;
    s.world_size = *world_size;
  } else if (rank.has_value()) {
    return Incomplete(launcher, launcher ? launcher->world_size : "",
                      "world_size", *rank, args.rank.has_value());
  } else if (world_size.has_value()) {
    return Incomplete(launcher, launcher ? launcher->rank : "", "rank",
                      *world_size, args.world_size.has_value());
  } else {
    // DetectLauncher found a marker variable, so this means no launcher.
    s.rank = Setting{0, "rank 0 (single process)"};
    s.world_size = Setting{1, "world size 1 (single process)"};
  }

  DTRAIN_ASSIGN_OR_RETURN(const absl::optional<Setting> local_rank,
                          Pick(args.local_rank, "local_rank", env,
                               launcher ? launcher->local_rank : nullptr));
  absl::optional<Setting> local_world_size;
  if (args.local_world_size.has_value() || launcher == nullptr ||
      launcher->local_world_size != nullptr) {
    DTRAIN_ASSIGN_OR_RETURN(
        local_world_size,
        Pick(args.local_world_size, "local_world_size", env,
             launcher ? launcher->local_world_size : nullptr));
  } else {
    DTRAIN_ASSIGN_OR_RETURN(local_world_size, SlurmLocalWorldSize(env));
  }
  // The tutorials' explicit form passes --local_rank alone: torchrun's
  // LOCAL_WORLD_SIZE, where set, supplies what no launcher did.
  if (args.local_rank.has_value() && !local_world_size.has_value()) {
    DTRAIN_ASSIGN_OR_RETURN(local_world_size, ReadInt(env, "LOCAL_WORLD_SIZE"));
  }
  DTRAIN_RETURN_IF_ERROR(ResolveLocal(local_rank, local_world_size, launcher,
                                      args.local_rank.has_value(),
                                      args.local_world_size.has_value(), &s));
  DTRAIN_RETURN_IF_ERROR(Validate(s));

  LaunchEnv out;
  Fill(s, &out);
  if (args.rank.has_value() && args.world_size.has_value()) {
    out.source = LaunchSource::kExplicit;
  } else if (launcher != nullptr) {
    out.source = launcher->source;
  }  // else the default, kSingleProcess

  DTRAIN_ASSIGN_OR_RETURN(const bool have_addr,
                          ExplicitOrEnvMasterAddr(env, args, &out));
  if (!have_addr && launcher != nullptr &&
      launcher->source == LaunchSource::kSlurm) {
    DTRAIN_RETURN_IF_ERROR(SlurmMasterAddr(env, &out));
  }
  DTRAIN_RETURN_IF_ERROR(ExplicitOrEnvMasterPort(env, args, &out));
  if (auto it = env.find("GLOO_SOCKET_IFNAME"); it != env.end()) {
    out.gloo_socket_ifname = it->second;
  }
  // torchrun's agent serves the store; PyTorch's test is this exact text.
  if (out.source == LaunchSource::kTorchrun) {
    const std::string* agent = Find(env, "TORCHELASTIC_USE_AGENT_STORE");
    out.agent_store = agent != nullptr && *agent == "True";
  }
  DTRAIN_ASSIGN_OR_RETURN(out.restart_count, RestartCount(env));
  return out;
}

bool OperatorPod(const EnvMap& env) {
  if (Find(env, "KUBERNETES_SERVICE_HOST") == nullptr) return false;
  if (Find(env, "VC_TASK_INDEX") != nullptr) return true;
  for (const auto& [name, value] : env) {
    if (absl::StartsWith(name, "PET_")) return true;
  }
  return false;
}

bool LaunchedAsRank(const EnvMap& env) {
  for (const char* var : {"LOCAL_RANK", "LOCAL_WORLD_SIZE",
                          "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    if (Find(env, var) != nullptr) return true;
  }
  return false;
}

absl::StatusOr<std::string> StoreToken(const EnvMap& env) {
  const std::string* token = Find(env, "DTRAIN_STORE_TOKEN");
  const std::string* file = Find(env, "DTRAIN_STORE_TOKEN_FILE");
  if (token != nullptr && file != nullptr)
    return absl::InvalidArgumentError(
        "DTRAIN_STORE_TOKEN and DTRAIN_STORE_TOKEN_FILE are both set: set one");
  std::string out;
  if (token != nullptr) {
    out = *token;
  } else if (file != nullptr) {
    absl::StatusOr<std::string> text =
        base::ReadFile(*file, base::kSecretFileLimit);
    if (!text.ok())
      return absl::Status(
          text.status().code(),
          absl::StrCat("DTRAIN_STORE_TOKEN_FILE: ", text.status().message()));
    out = *std::move(text);
    if (!out.empty() && out.back() == '\n') out.pop_back();
  } else {
    return std::string();
  }
  if (out.empty())
    return absl::InvalidArgumentError(absl::StrCat(
        token != nullptr ? "DTRAIN_STORE_TOKEN" : "DTRAIN_STORE_TOKEN_FILE",
        " gives an empty token"));
  return out;
}

absl::StatusOr<int> RestartCount(const EnvMap& env) {
  for (const char* name :
       {"DTRAIN_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT"}) {
    const std::string* text = Find(env, name);
    if (text == nullptr) continue;
    DTRAIN_ASSIGN_OR_RETURN(const int count, ParseInt(name, *text));
    if (count < 0)
      return absl::InvalidArgumentError(
          absl::StrCat(name, "=", count, " is negative"));
    return count;
  }
  return 0;
}

absl::StatusOr<ExplicitArgs> MergeQueryArgs(const ExplicitArgs& args,
                                            const InitMethod& method) {
  ExplicitArgs merged = args;
  const auto merge = [&](absl::optional<int>* arg,
                         const absl::optional<int>& query,
                         absl::string_view name) {
    if (!query.has_value()) return absl::OkStatus();
    if (arg->has_value() && **arg != *query) {
      return absl::InvalidArgumentError(
          absl::StrCat("init method '", method.ToString(), "' gives ", name,
                       "=", *query, " but the ", name, " argument is ", **arg));
    }
    *arg = query;
    return absl::OkStatus();
  };
  DTRAIN_RETURN_IF_ERROR(merge(&merged.rank, method.rank, "rank"));
  DTRAIN_RETURN_IF_ERROR(
      merge(&merged.world_size, method.world_size, "world_size"));
  return merged;
}

}  // namespace dtrain::rendezvous
