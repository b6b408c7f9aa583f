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

constexpr int kMaxCount = 1 << 20;  // nodes, ranks: base::kMaxWorldSize

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
  if (value < 1 || value > kMaxCount)
    return Bad(var, text, absl::StrCat("is outside 1..", kMaxCount));
  return value;
}

// Parses `value` of `var` into `o`; `note` gets what the log adds.
using Parse = absl::Status (*)(const char* var, const std::string& value,
                               const NodeDevices& devices, LaunchOptions* o,
                               std::string* note);

absl::Status ParseProcs(const char* var, const std::string& v,
                        const NodeDevices& devices, LaunchOptions* o,
                        std::string* note) {
  DTRAIN_ASSIGN_OR_RETURN(o->nproc_per_node,
                          ProcsPerNode(var, v, devices, note));
  return absl::OkStatus();
}

absl::Status ParseNodes(const char* var, const std::string& v,
                        const NodeDevices&, LaunchOptions* o,
                        std::string* note) {
  // A pod's WORLD_SIZE is a count of pods; PET_NNODES may be MIN:MAX.
  if (absl::string_view(var) == "WORLD_SIZE") {
    DTRAIN_ASSIGN_OR_RETURN(o->nnodes, Integer(var, v, 1, kMaxCount));
    o->max_nnodes = o->nnodes;
    *note = " (pods)";
    return absl::OkStatus();
  }
  NnodesFlag n;
  std::string error;
  if (!AbslParseFlag(v, &n, &error)) return Bad(var, v, error);
  if (n.min != n.max && !o->elastic)
    return Bad(var, v, "is a range of nodes, for an elastic job (--elastic)");
  o->nnodes = n.min;
  o->max_nnodes = n.max;
  return absl::OkStatus();
}

absl::Status ParseNodeRank(const char* var, const std::string& v,
                           const NodeDevices&, LaunchOptions* o,
                           std::string* note) {
  DTRAIN_ASSIGN_OR_RETURN(o->node_rank, Integer(var, v, 0, kMaxCount - 1));
  if (absl::string_view(var) == "RANK") *note = " (this pod)";
  return absl::OkStatus();
}

absl::Status ParseAddr(const char* var, const std::string& v,
                       const NodeDevices&, LaunchOptions* o, std::string*) {
  if (v.empty()) return Bad(var, v, "is empty");
  o->master_addr = v;
  return absl::OkStatus();
}

absl::Status ParsePort(const char* var, const std::string& v,
                       const NodeDevices&, LaunchOptions* o, std::string*) {
  DTRAIN_ASSIGN_OR_RETURN(o->master_port, Integer(var, v, 1, 65535));
  return absl::OkStatus();
}

absl::Status ParseRestarts(const char* var, const std::string& v,
                           const NodeDevices&, LaunchOptions* o, std::string*) {
  DTRAIN_ASSIGN_OR_RETURN(o->max_restarts, Integer(var, v, 0, kMaxCount));
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
  // Static rendezvous (torchrun's default) is what the master address and
  // port give; the others hand node ranks out at run time.
  if (const std::string* rdzv = Find(env, "PET_RDZV_BACKEND");
      rdzv != nullptr && !rdzv->empty() && *rdzv != "static" &&
      !given.node_rank) {
    return Bad("PET_RDZV_BACKEND", *rdzv,
               "(a PyTorchJob's elasticPolicy) asks for a dynamic rendezvous "
               "that hands node ranks out, which launch does not do: drop the "
               "elasticPolicy (train --elastic survives a lost rank within the "
               "job; docs/LAUNCHERS.md, \"Kubernetes\")");
  }
  // An operator that speaks only RANK and WORLD_SIZE (Volcano) runs one
  // launcher per pod, so they count pods. Never outside an operator's pod: a
  // Service named "master" gives every pod MASTER_PORT=tcp://...
  const std::string* rank = Find(env, "RANK");
  const std::string* world = Find(env, "WORLD_SIZE");
  const bool pod =
      rendezvous::OperatorPod(env) && (rank != nullptr || world != nullptr);
  if (pod && (rank == nullptr) != (world == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "this pod sets ", rank != nullptr ? "RANK" : "WORLD_SIZE", " but not ",
        rank != nullptr ? "WORLD_SIZE" : "RANK",
        ": an operator sets both (the pods and this pod's index)"));
  }
  struct Row {
    bool given;
    const char* pet;
    const char* pod;  // nullptr: torchrun's variable only
    Parse parse;
  };
  const Row rows[] = {
      {given.nproc_per_node, "PET_NPROC_PER_NODE", nullptr, ParseProcs},
      {given.nnodes, "PET_NNODES", "WORLD_SIZE", ParseNodes},
      {given.node_rank, "PET_NODE_RANK", "RANK", ParseNodeRank},
      {given.master_addr, "PET_MASTER_ADDR", "MASTER_ADDR", ParseAddr},
      {given.master_port, "PET_MASTER_PORT", "MASTER_PORT", ParsePort},
      {given.max_restarts, "PET_MAX_RESTARTS", nullptr, ParseRestarts},
  };
  std::vector<std::string> used;
  for (const Row& row : rows) {
    if (row.given) continue;
    const char* var = row.pet;
    const std::string* value = Find(env, var);
    if (value == nullptr && pod && row.pod != nullptr) {
      var = row.pod;
      value = Find(env, var);
    }
    if (value == nullptr) continue;
    std::string note;
    DTRAIN_RETURN_IF_ERROR(row.parse(var, *value, devices, o, &note));
    used.push_back(absl::StrCat(var, "=", *value, note));
  }
  return absl::StrJoin(used, ", ");
}

int VisibleNvidiaGpus(const EnvMap& env, const std::string& dev) {
  if (const std::string* visible = Find(env, "CUDA_VISIBLE_DEVICES")) {
    const std::string list(absl::StripAsciiWhitespace(*visible));
    if (list.empty() || absl::StartsWith(list, "-1")) return 0;
    // Every entry counts, as torchrun counts them; CUDA itself would stop at
    // the first invalid one.
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
