#include "dist/launch/node_env.h"

#include <dirent.h>

#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "base/status_macros.h"
#include "dist/launch/nnodes_flag.h"

namespace dtrain::launch {
namespace {

using rendezvous::EnvMap;

const std::string* Find(const EnvMap& env, absl::string_view name) {
  auto it = env.find(name);
  return it == env.end() ? nullptr : &it->second;
}

absl::Status Bad(absl::string_view var, absl::string_view value,
                 absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(var, "='", value, "' ", why));
}

absl::StatusOr<int> Integer(absl::string_view var, absl::string_view text,
                            int min, int max) {
  int value = 0;
  if (!absl::SimpleAtoi(text, &value))
    return Bad(var, text, "is not an integer");
  if (value < min || value > max) {
    return Bad(var, text, absl::StrCat("is outside ", min, "..", max));
  }
  return value;
}

// torchrun's words for the ranks of a node; a number otherwise.
absl::StatusOr<int> ProcsPerNode(absl::string_view var, absl::string_view text,
                                 const NodeDevices& devices,
                                 std::string* note) {
  const std::string word = absl::AsciiStrToLower(text);
  const bool gpu = word == "gpu" || (word == "auto" && devices.gpus > 0);
  if (gpu) {
    if (devices.gpus == 0)
      return Bad(var, text, "asks for one rank per GPU, and none is visible");
    *note = absl::StrCat(" (", devices.gpus,
                         devices.gpus == 1 ? " GPU" : " GPUs", ")");
    return devices.gpus;
  }
  if (word == "cpu" || word == "auto") {
    *note = absl::StrCat(" (", devices.cores,
                         devices.cores == 1 ? " core" : " cores",
                         word == "auto" ? ", no GPU" : "", ")");
    return devices.cores;
  }
  int value = 0;
  if (!absl::SimpleAtoi(text, &value))
    return Bad(var, text, "is neither a number of ranks nor auto, gpu or cpu");
  return Integer(var, text, 1, 1 << 20);
}

// Takes `var` for a setting the command line did not give; notes it in `used`.
template <typename Apply>
absl::Status Take(const EnvMap& env, const char* var, bool given,
                  std::vector<std::string>* used, Apply apply) {
  const std::string* value = Find(env, var);
  if (value == nullptr || given) return absl::OkStatus();
  std::string note;
  DTRAIN_RETURN_IF_ERROR(apply(*value, &note));
  used->push_back(absl::StrCat(var, "=", *value, note));
  return absl::OkStatus();
}

}  // namespace

bool HasNodeSettings(const EnvMap& env) {
  for (const char* var :
       {"PET_NPROC_PER_NODE", "PET_NNODES", "PET_NODE_RANK", "PET_MASTER_ADDR",
        "PET_MASTER_PORT", "PET_MAX_RESTARTS", "PET_RDZV_BACKEND"}) {
    if (Find(env, var) != nullptr) return true;
  }
  return false;
}

absl::StatusOr<std::string> ApplyNodeEnv(const EnvMap& env,
                                         const GivenSettings& given,
                                         const NodeDevices& devices,
                                         LaunchOptions* o) {
  // Static rendezvous (torchrun's default backend name) is what the master
  // address and port give; the others hand node ranks out at run time.
  if (const std::string* rdzv = Find(env, "PET_RDZV_BACKEND");
      rdzv != nullptr && *rdzv != "static" && !given.node_rank) {
    return Bad("PET_RDZV_BACKEND", *rdzv,
               "(a PyTorchJob's elasticPolicy) asks for a dynamic rendezvous "
               "that hands node ranks out, which launch does not do: drop the "
               "elasticPolicy (train --elastic survives a lost rank within the "
               "job; docs/LAUNCHERS.md, \"Kubernetes\")");
  }
  std::vector<std::string> used;
  DTRAIN_RETURN_IF_ERROR(
      Take(env, "PET_NPROC_PER_NODE", given.nproc_per_node, &used,
           [&](const std::string& v, std::string* note) -> absl::Status {
             DTRAIN_ASSIGN_OR_RETURN(
                 o->nproc_per_node,
                 ProcsPerNode("PET_NPROC_PER_NODE", v, devices, note));
             return absl::OkStatus();
           }));
  DTRAIN_RETURN_IF_ERROR(
      Take(env, "PET_NNODES", given.nnodes, &used,
           [&](const std::string& v, std::string*) -> absl::Status {
             NnodesFlag n;
             std::string error;
             if (!AbslParseFlag(v, &n, &error))
               return Bad("PET_NNODES", v, error);
             o->nnodes = n.min;
             o->max_nnodes = n.max;
             return absl::OkStatus();
           }));
  DTRAIN_RETURN_IF_ERROR(
      Take(env, "PET_NODE_RANK", given.node_rank, &used,
           [&](const std::string& v, std::string*) -> absl::Status {
             DTRAIN_ASSIGN_OR_RETURN(o->node_rank,
                                     Integer("PET_NODE_RANK", v, 0, 1 << 20));
             return absl::OkStatus();
           }));
  DTRAIN_RETURN_IF_ERROR(
      Take(env, "PET_MASTER_ADDR", given.master_addr, &used,
           [&](const std::string& v, std::string*) -> absl::Status {
             if (v.empty()) return Bad("PET_MASTER_ADDR", v, "is empty");
             o->master_addr = v;
             return absl::OkStatus();
           }));
  DTRAIN_RETURN_IF_ERROR(
      Take(env, "PET_MASTER_PORT", given.master_port, &used,
           [&](const std::string& v, std::string*) -> absl::Status {
             DTRAIN_ASSIGN_OR_RETURN(o->master_port,
                                     Integer("PET_MASTER_PORT", v, 1, 65535));
             return absl::OkStatus();
           }));
  DTRAIN_RETURN_IF_ERROR(
      Take(env, "PET_MAX_RESTARTS", given.max_restarts, &used,
           [&](const std::string& v, std::string*) -> absl::Status {
             DTRAIN_ASSIGN_OR_RETURN(
                 o->max_restarts, Integer("PET_MAX_RESTARTS", v, 0, 1 << 20));
             return absl::OkStatus();
           }));

  // A pod of an operator that speaks only RANK and WORLD_SIZE (Volcano):
  // one launcher per pod, so they count pods.
  const bool pod = Find(env, "KUBERNETES_SERVICE_HOST") != nullptr;
  if (pod && Find(env, "PET_NNODES") == nullptr) {
    const std::string* rank = Find(env, "RANK");
    const std::string* world = Find(env, "WORLD_SIZE");
    if ((rank == nullptr) != (world == nullptr)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "this pod sets ", rank != nullptr ? "RANK" : "WORLD_SIZE",
          " but not ", rank != nullptr ? "WORLD_SIZE" : "RANK",
          ": an operator sets both (the pods and this pod's index)"));
    }
    DTRAIN_RETURN_IF_ERROR(
        Take(env, "WORLD_SIZE", given.nnodes, &used,
             [&](const std::string& v, std::string* note) -> absl::Status {
               DTRAIN_ASSIGN_OR_RETURN(o->nnodes,
                                       Integer("WORLD_SIZE", v, 1, 1 << 20));
               o->max_nnodes = o->nnodes;
               *note = " (pods)";
               return absl::OkStatus();
             }));
    DTRAIN_RETURN_IF_ERROR(Take(
        env, "RANK", given.node_rank, &used,
        [&](const std::string& v, std::string* note) -> absl::Status {
          DTRAIN_ASSIGN_OR_RETURN(o->node_rank, Integer("RANK", v, 0, 1 << 20));
          *note = " (this pod)";
          return absl::OkStatus();
        }));
  }
  if (pod && Find(env, "PET_MASTER_ADDR") == nullptr) {
    DTRAIN_RETURN_IF_ERROR(
        Take(env, "MASTER_ADDR", given.master_addr, &used,
             [&](const std::string& v, std::string*) -> absl::Status {
               if (v.empty()) return Bad("MASTER_ADDR", v, "is empty");
               o->master_addr = v;
               return absl::OkStatus();
             }));
  }
  if (pod && Find(env, "PET_MASTER_PORT") == nullptr) {
    DTRAIN_RETURN_IF_ERROR(
        Take(env, "MASTER_PORT", given.master_port, &used,
             [&](const std::string& v, std::string*) -> absl::Status {
               DTRAIN_ASSIGN_OR_RETURN(o->master_port,
                                       Integer("MASTER_PORT", v, 1, 65535));
               return absl::OkStatus();
             }));
  }
  return absl::StrJoin(used, ", ");
}

int VisibleNvidiaGpus(const EnvMap& env, const std::string& dev) {
  if (const std::string* visible = Find(env, "CUDA_VISIBLE_DEVICES")) {
    const std::string list(absl::StripAsciiWhitespace(*visible));
    if (list.empty() || absl::StartsWith(list, "-1")) return 0;
    // CUDA stops at the first entry it cannot use; count the entries.
    return static_cast<int>(
        std::vector<std::string>(absl::StrSplit(list, ',')).size());
  }
  int count = 0;
  if (DIR* d = ::opendir(dev.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      absl::string_view name = e->d_name;
      int index = 0;
      if (absl::ConsumePrefix(&name, "nvidia") && !name.empty() &&
          absl::SimpleAtoi(name, &index) && absl::ascii_isdigit(name[0])) {
        ++count;
      }
    }
    ::closedir(d);
  }
  return count;
}

}  // namespace dtrain::launch
