#include "experiments/sweep.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/machine_limits.h"
#include "base/status_macros.h"

namespace dtrain::experiments {
namespace {

absl::Status Invalid(absl::string_view flag, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", why));
}

// Each repeat runs every configuration again; the plan holds them all.
constexpr int kMaxRepeats = 1000;

// Train's flags that the sweep sets for every run (run_training.cc's
// TrainingCommand), and where the runner takes each instead.
struct OwnFlag {
  const char* name;
  const char* instead;
};
constexpr OwnFlag kOwnFlags[] = {
    {"model", "--models"},
    {"batch_size", "--batch_sizes or --global_batch"},
    {"epochs", "--epochs"},
    {"max_steps", "--max_steps"},
    {"train_limit", "--train_limit"},
    {"dist_backend", "--backends"},
    {"device", "--backends"},
    {"shm", "--backends"},
    {"sync_gradients", "--bound"},
    {"comm_hook", "--comm_hooks"},
    {"zero", "--zero_stages"},
    {"fp16_allreduce", "--comm_hooks=fp16"},
    {"metrics_json", "--output_dir"},
    {"small_input_stem", "--models=resnet18"},
    {"skip_validation", "nothing: the sweep measures training only"},
    {"progress", "nothing: runs are logged under --output_dir"},
    {"timeout", "--run_timeout"},
    {"trace", "--trace (a file per run in --output_dir's traces/)"},
    {"flight_recorder", "--instrumentation=no_flight_recorder"},
};

// "--name=value" or "--name" -> name; empty when `flag` is neither.
std::string FlagName(const std::string& flag) {
  if (!absl::StartsWith(flag, "--")) return "";
  const std::string name = flag.substr(2, flag.find('=') - 2);
  if (name.empty()) return "";
  for (char c : name) {
    if (!absl::ascii_isalnum(c) && c != '_') return "";
  }
  return name;
}

// The knobs against train's own ranges (trainer/options/
// data_parallel_options.cc), so that a sweep does not fail every run.
absl::Status CheckKnobs(const DdpKnobs& k,
                        const std::vector<std::string>& hooks) {
  auto at_least = [](const char* flag, const absl::optional<int64_t>& v,
                     int64_t min) -> absl::Status {
    if (v && *v < min) {
      return Invalid(flag, absl::StrCat(*v, " is not >= ", min));
    }
    return absl::OkStatus();
  };
  DTRAIN_RETURN_IF_ERROR(at_least("powersgd_rank", k.powersgd_rank, 1));
  DTRAIN_RETURN_IF_ERROR(
      at_least("powersgd_start_step", k.powersgd_start_step, 0));
  DTRAIN_RETURN_IF_ERROR(
      at_least("local_sgd_start_step", k.local_sgd_start_step, 0));
  DTRAIN_RETURN_IF_ERROR(at_least("local_sgd_period", k.local_sgd_period, 1));
  DTRAIN_RETURN_IF_ERROR(at_least("powersgd_seed", k.powersgd_seed, 0));
  if (k.powersgd_seed && *k.powersgd_seed > 0xFFFFFFFFll) {
    return Invalid(
        "powersgd_seed",
        absl::StrCat(*k.powersgd_seed, " is beyond 2^32 - 1 (numpy's seeds)"));
  }
  // PyTorch's rule for start_powerSGD_iter, which train follows.
  if (std::find(hooks.begin(), hooks.end(), "powersgd") != hooks.end() &&
      k.powersgd_start_step && *k.powersgd_start_step < 2 &&
      (k.powersgd_error_feedback.value_or(true) ||
       k.powersgd_warm_start.value_or(true))) {
    return Invalid("powersgd_start_step",
                   absl::StrCat(*k.powersgd_start_step,
                                ": PowerSGD needs at least 2 with error "
                                "feedback or warm start (PyTorch's rule for "
                                "start_powerSGD_iter, train's too)"));
  }
  if (const auto& rate = k.powersgd_min_compression_rate;
      rate && (!(*rate >= 1) || !std::isfinite(*rate))) {
    return Invalid("powersgd_min_compression_rate",
                   absl::StrCat(*rate, " is not a finite number >= 1"));
  }
  return absl::OkStatus();
}

// --comm_hooks: known, each once.
absl::Status CheckHooks(const std::vector<std::string>& hooks) {
  if (hooks.empty()) return Invalid("comm_hooks", "empty");
  std::set<std::string> seen;
  for (const std::string& hook : hooks) {
    if (std::find(std::begin(kCommHooks), std::end(kCommHooks), hook) ==
        std::end(kCommHooks)) {
      return Invalid("comm_hooks",
                     absl::StrCat("unknown hook '", hook, "'; known: ",
                                  absl::StrJoin(kCommHooks, ", ")));
    }
    if (!seen.insert(hook).second) {
      return Invalid("comm_hooks", absl::StrCat("'", hook, "' given twice"));
    }
  }
  return absl::OkStatus();
}

// --instrumentation: known, each once, the default among them.
absl::Status CheckInstrumentation(const std::vector<std::string>& kinds) {
  std::set<std::string> seen;
  for (const std::string& kind : kinds) {
    if (std::find(std::begin(kInstrumentations), std::end(kInstrumentations),
                  kind) == std::end(kInstrumentations)) {
      return Invalid("instrumentation",
                     absl::StrCat("unknown '", kind, "'; known: ",
                                  absl::StrJoin(kInstrumentations, ", ")));
    }
    if (!seen.insert(kind).second) {
      return Invalid("instrumentation",
                     absl::StrCat("'", kind, "' given twice"));
    }
  }
  if (seen.count(kDefaultInstrumentation) == 0) {
    return Invalid("instrumentation",
                   "must include default: the others are measured against it");
  }
  return absl::OkStatus();
}

// --zero_stages: 0, 1 or 2, each once, 0 among them.
absl::Status CheckZeroStages(const std::vector<int>& stages) {
  std::set<int> seen;
  for (int z : stages) {
    if (z < 0 || z > 2) {
      return Invalid("zero_stages",
                     absl::StrCat(z,
                                  " is not 0 (none), 1 or 2 (train's "
                                  "--zero)"));
    }
    if (!seen.insert(z).second) {
      return Invalid("zero_stages", absl::StrCat(z, " given twice"));
    }
  }
  if (seen.count(0) == 0) {
    return Invalid("zero_stages",
                   "must include 0: ZeRO's rows are read against plain "
                   "DDP's (speedup baseline, one-process bound)");
  }
  return absl::OkStatus();
}

// The flags every training gets: the knobs', then --train_flags, each
// --name[=value], none the sweep's own, none twice.
absl::StatusOr<std::vector<std::string>> TrainFlags(const SweepOptions& o) {
  DTRAIN_RETURN_IF_ERROR(CheckKnobs(o.knobs, o.comm_hooks));
  std::vector<std::string> flags = KnobFlags(o.knobs);
  std::set<std::string> knobs, names;
  for (const std::string& flag : flags) knobs.insert(FlagName(flag));
  for (const std::string& flag : o.train_flags) {
    const std::string name = FlagName(flag);
    if (name.empty()) {
      return Invalid(
          "train_flags",
          absl::StrCat("'", flag, "' is not a flag (--name or --name=value)"));
    }
    // results.csv holds the flags in one unquoted field.
    if (flag.find_first_of(",\"\n\r") != std::string::npos) {
      return Invalid(
          "train_flags",
          absl::StrCat("'", flag, "' holds a comma, quote or line break"));
    }
    for (const OwnFlag& own : kOwnFlags) {
      // Abseil's --noNAME spelling of a bool counts too.
      if (name == own.name || name == absl::StrCat("no", own.name)) {
        return Invalid(
            "train_flags",
            absl::StrCat("--", name, " is set by the sweep for every run; use ",
                         own.instead));
      }
    }
    if (knobs.count(name) > 0) {
      return Invalid(
          "train_flags",
          absl::StrCat("--", name, " is also given as the runner's own --",
                       name, "; give it once"));
    }
    if (!names.insert(name).second) {
      return Invalid("train_flags", absl::StrCat("--", name, " given twice"));
    }
    flags.push_back(flag);
  }
  return flags;
}

// The hook and ZeRO stage in a run's name, each after `separator`; nothing
// for the default hook and stage 0.
std::string HookPart(const std::string& hook, int zero,
                     absl::string_view separator) {
  return absl::StrCat(
      hook == kDefaultCommHook ? "" : absl::StrCat(separator, hook),
      zero == 0 ? "" : absl::StrCat(separator, "zero", zero));
}

}  // namespace

std::vector<std::string> KnobFlags(const DdpKnobs& k) {
  std::vector<std::string> out;
  auto add_int = [&out](const char* name, const absl::optional<int64_t>& v) {
    if (v) out.push_back(absl::StrCat("--", name, "=", *v));
  };
  auto add_bool = [&out](const char* name, const absl::optional<bool>& v) {
    if (v) out.push_back(absl::StrCat("--", name, "=", *v ? "true" : "false"));
  };
  add_int("powersgd_rank", k.powersgd_rank);
  add_int("powersgd_start_step", k.powersgd_start_step);
  if (k.powersgd_min_compression_rate) {
    // The shortest text that gives back the same double: 2.5, 0.1.
    char text[64];
    const std::to_chars_result end = std::to_chars(
        text, text + sizeof(text), *k.powersgd_min_compression_rate);
    out.push_back(absl::StrCat("--powersgd_min_compression_rate=",
                               absl::string_view(text, end.ptr - text)));
  }
  add_bool("powersgd_error_feedback", k.powersgd_error_feedback);
  add_bool("powersgd_warm_start", k.powersgd_warm_start);
  add_int("powersgd_seed", k.powersgd_seed);
  add_int("local_sgd_start_step", k.local_sgd_start_step);
  add_int("local_sgd_period", k.local_sgd_period);
  add_bool("gradient_as_bucket_view", k.gradient_as_bucket_view);
  add_bool("static_graph", k.static_graph);
  return out;
}

int64_t DefaultBatchSize(int world_size) {
  return world_size >= kDefaultGlobalBatch
             ? 1
             : kDefaultGlobalBatch / std::max(world_size, 1);
}

std::string RunConfig::Name() const {
  return absl::StrCat(implementation, " ", backend, " ", model,
                      HookPart(comm_hook, zero, " "), " np=", world_size,
                      " bs=", batch_size,
                      instrumentation == kDefaultInstrumentation
                          ? ""
                          : absl::StrCat(" ", instrumentation),
                      sync_gradients ? "" : " no-sync",
                      repeat > 0 ? absl::StrCat(" #", repeat + 1) : "");
}

std::string RunConfig::Slug() const {
  return absl::StrCat(implementation, "_", backend, "_", model,
                      HookPart(comm_hook, zero, "_"), "_np", world_size, "_bs",
                      batch_size,
                      instrumentation == kDefaultInstrumentation
                          ? ""
                          : absl::StrCat("_", instrumentation),
                      sync_gradients ? "_sync" : "_nosync", "_r", repeat);
}

absl::StatusOr<SweepPlan> PlanSweep(const SweepOptions& o) {
  if (o.world_sizes.empty()) return Invalid("world_sizes", "empty");
  for (int n : o.world_sizes) {
    if (n < 1) return Invalid("world_sizes", absl::StrCat(n, " is not >= 1"));
  }
  if (o.global_batch <= 0 && !o.batch_sizes.empty() &&
      o.batch_sizes.size() != 1 &&
      o.batch_sizes.size() != o.world_sizes.size()) {
    return Invalid(
        "batch_sizes",
        absl::StrCat("give one size, one per world size (",
                     o.world_sizes.size(), "), or none (", kDefaultGlobalBatch,
                     " / world size each), not ", o.batch_sizes.size()));
  }
  for (int64_t b : o.batch_sizes) {
    if (b < 1) return Invalid("batch_sizes", absl::StrCat(b, " is not >= 1"));
    DTRAIN_RETURN_IF_ERROR(
        base::CheckAtMost("--batch_sizes", b, base::BatchSizeLimit()));
  }
  if (o.repeats < 1) return Invalid("repeats", "must be >= 1");
  DTRAIN_RETURN_IF_ERROR(base::CheckAtMost(
      "--repeats", o.repeats,
      {kMaxRepeats, "a fixed cap: each repeat reruns every configuration"}));
  if (o.epochs < 1) return Invalid("epochs", "must be >= 1");
  if (o.models.empty()) return Invalid("models", "empty");
  if (o.backends.empty()) return Invalid("backends", "empty");
  DTRAIN_RETURN_IF_ERROR(CheckHooks(o.comm_hooks));
  DTRAIN_RETURN_IF_ERROR(CheckZeroStages(o.zero_stages));
  DTRAIN_RETURN_IF_ERROR(CheckInstrumentation(o.instrumentation));
  if (o.trace && o.instrumentation.size() > 1) {
    return Invalid("trace",
                   "does not combine with --instrumentation beyond default: "
                   "the default's runs, which the others are measured "
                   "against, would be traced too");
  }
  DTRAIN_ASSIGN_OR_RETURN(const std::vector<std::string> train_flags,
                          TrainFlags(o));
  if (o.nnodes < 1) {
    return Invalid("nnodes", absl::StrCat(o.nnodes, " is not >= 1"));
  }
  DTRAIN_RETURN_IF_ERROR(
      base::CheckAtMost("--nnodes", o.nnodes, base::WorldSizeLimit()));
  // Every run starts its share of the processes on this machine.
  const base::Limit processes = base::LocalProcessLimit();
  for (int n : o.world_sizes) {
    DTRAIN_RETURN_IF_ERROR(
        base::CheckAtMost("--world_sizes", n, base::WorldSizeLimit()));
    const int64_t per_node = (int64_t{n} + o.nnodes - 1) / o.nnodes;
    if (per_node > processes.max) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--world_sizes=", n, ": ", per_node, " processes per node (over ",
          o.nnodes, o.nnodes == 1 ? " node" : " nodes", "): at most ",
          processes.max, " (", processes.why, ")"));
    }
  }
  if (o.node_rank < 0 || o.node_rank >= o.nnodes) {
    return Invalid("node_rank",
                   absl::StrCat(o.node_rank, " is outside [0, ", o.nnodes,
                                ") (--nnodes=", o.nnodes, ")"));
  }
  if (o.nnodes > 1 && o.master_addr.empty()) {
    return Invalid("master_addr",
                   absl::StrCat("--nnodes=", o.nnodes,
                                " needs the address of node 0, where rank 0 "
                                "serves every run's rendezvous"));
  }
  if (o.master_port < 0 || o.master_port > 65535) {
    return Invalid("master_port",
                   absl::StrCat(o.master_port, " is outside 0..65535"));
  }

  SweepPlan plan;
  auto skip = [&plan](std::string what, std::string why) {
    for (const Skipped& s : plan.skipped) {
      if (s.what == what && s.why == why) return;
    }
    plan.skipped.push_back({std::move(what), std::move(why)});
  };
  std::vector<std::string> implementations = {"dtrain"};
  if (o.reference_pytorch) implementations.push_back("pytorch");
  for (const std::string& backend : o.backends) {
    if (backend != "gloo" && backend != "gloo+shm" && backend != "nccl" &&
        backend != "shm") {
      return Invalid("backends",
                     absl::StrCat("unknown backend '", backend,
                                  "'; known: gloo, gloo+shm, nccl, shm"));
    }
  }
  for (const std::string& model : o.models) {
    if (model != "convnet" && model != "resnet18") {
      return Invalid("models", absl::StrCat("unknown model '", model,
                                            "'; known: convnet, resnet18"));
    }
  }
  const PythonTorch& py = o.python_torch;
  const std::string py_name = absl::StrCat("Python torch ", py.version);
  std::string py_nccl_missing;  // why PyTorch's NCCL runs cannot run at all
  if (!py.cuda) {
    py_nccl_missing = absl::StrCat(py_name, " has no CUDA");
  } else if (!py.nccl) {
    py_nccl_missing = absl::StrCat(py_name, " has no NCCL");
  } else if (py.cuda_devices == 0) {
    py_nccl_missing = absl::StrCat(py_name, " sees 0 CUDA devices");
  }
  // Why a run of `impl` with `hook` on `backend` cannot run; empty if it can.
  auto hook_missing = [&](const std::string& impl, const std::string& hook,
                          const std::string& backend) -> std::string {
    if (impl != "pytorch" || backend == "nccl") return "";
    if (hook == "bf16" && !py.gloo_bfloat16) {
      return absl::StrCat(py_name, "'s Gloo cannot allreduce bfloat16");
    }
    if (hook == "fp16" && !py.gloo_float16) {
      return absl::StrCat(py_name, "'s Gloo cannot allreduce float16");
    }
    return "";
  };
  // Why a ZeRO stage cannot run with `hook` (for `impl`); empty if it can.
  auto zero_missing = [&](const std::string& impl, const std::string& hook,
                          int zero) -> std::string {
    if (zero == 0) return "";
    if (hook == "local_sgd") {
      return "post-local SGD averages parameters that ZeRO's ranks do not "
             "each keep the state of";
    }
    if (zero == 2 && hook != kDefaultCommHook) {
      return "stage 2 averages gradients with its own reduce-scatter hook";
    }
    if (zero == 2 && impl == "pytorch") {
      return "PyTorch's ZeroRedundancyOptimizer is stage 1 (its stage 2 is "
             "FSDP)";
    }
    return "";
  };
  const int first_port =
      o.master_port == 0 && o.nnodes > 1 ? kDefaultMasterPort : o.master_port;
  // Counts every configuration the flags name, planned or skipped: the same
  // on every node whatever its devices.
  int slot = 0;
  for (const std::string& backend : o.backends) {
    for (const std::string& model : o.models) {
      for (size_t i = 0; i < o.world_sizes.size(); ++i) {
        const int n = o.world_sizes[i];
        int64_t batch = 0;
        if (o.global_batch > 0) {
          if (o.global_batch % n != 0) {
            return Invalid(
                "global_batch",
                absl::StrCat(o.global_batch, " does not split evenly over ", n,
                             " processes"));
          }
          batch = o.global_batch / n;
          if (batch > base::kMaxBatchSize) {
            return Invalid(
                "global_batch",
                absl::StrCat(o.global_batch, " over ", n, " processes is ",
                             batch, " per process: at most ",
                             base::kMaxBatchSize, " (",
                             base::BatchSizeLimit().why, ")"));
          }
        } else if (o.batch_sizes.empty()) {
          batch = DefaultBatchSize(n);
        } else {
          batch =
              o.batch_sizes.size() == 1 ? o.batch_sizes[0] : o.batch_sizes[i];
        }
        const int per_node = n / o.nnodes;
        const std::string devices_needed =
            o.nnodes == 1
                ? absl::StrCat(n, " CUDA devices")
                : absl::StrCat(per_node, " CUDA devices per node (", n,
                               " processes over ", o.nnodes, " nodes)");
        // This process count's runs, repeats outermost (below).
        std::vector<RunConfig> group;
        for (const std::string& impl : implementations) {
          bool skipped = true;
          if (n % o.nnodes != 0) {
            skip(absl::StrCat("np=", n),
                 absl::StrCat("world size ", n, " does not spread evenly over ",
                              o.nnodes, " nodes"));
          } else if (impl == "dtrain" && backend == "nccl" &&
                     o.cuda_devices == 0) {
            skip("nccl",
                 "no CUDA device is visible (or this LibTorch has no CUDA)");
          } else if (impl == "dtrain" && backend == "nccl" &&
                     per_node > o.cuda_devices) {
            skip(absl::StrCat("nccl np=", n),
                 absl::StrCat("needs ", devices_needed, ", ", o.cuda_devices,
                              " visible"));
          } else if (impl == "pytorch" &&
                     (backend == "shm" || backend == "gloo+shm")) {
            skip(absl::StrCat("pytorch ", backend),
                 "PyTorch has no shared-memory transport");
          } else if (impl == "pytorch" && backend == "nccl" &&
                     !py_nccl_missing.empty()) {
            skip("pytorch nccl", py_nccl_missing);
          } else if (impl == "pytorch" && backend == "nccl" &&
                     per_node > py.cuda_devices) {
            skip(absl::StrCat("pytorch nccl np=", n),
                 absl::StrCat("needs ", devices_needed, ", ", py_name, " sees ",
                              py.cuda_devices));
          } else {
            skipped = false;
          }
          // Each hook's synchronised runs at each ZeRO stage, this
          // project's under each instrumentation, then the no-sync runs (the
          // bound of every hook and stage: they average nothing).
          // An instrumentation is an index into o.instrumentation; -1: the
          // default, not rotated.
          struct Kind {
            std::string hook;
            int zero;
            bool sync;
            int instrumentation;
          };
          std::vector<Kind> kinds;
          const int variants = static_cast<int>(o.instrumentation.size());
          for (const std::string& hook : o.comm_hooks) {
            for (int zero : o.zero_stages) {
              if (impl != "dtrain") {
                kinds.push_back({hook, zero, true, -1});
                continue;
              }
              for (int i = 0; i < variants; ++i)
                kinds.push_back({hook, zero, true, i});
            }
          }
          if (n > 1 && o.bound)
            kinds.push_back({kDefaultCommHook, 0, false, -1});
          for (const auto& [hook, zero, sync, instrumentation] : kinds) {
            bool skip_hook = skipped;
            if (const std::string why = hook_missing(impl, hook, backend);
                !skipped && !why.empty()) {
              skip(absl::StrCat(impl, " ", hook), why);
              skip_hook = true;
            }
            if (const std::string why = zero_missing(impl, hook, zero);
                !skip_hook && !why.empty()) {
              skip(absl::StrCat(impl == "pytorch" ? "pytorch " : "", "zero",
                                zero, HookPart(hook, 0, " ")),
                   why);
              skip_hook = true;
            }
            for (int r = 0; r < o.repeats; ++r, ++slot) {
              if (skip_hook) continue;
              RunConfig c;
              c.implementation = impl;
              c.backend = backend;
              c.model = model;
              c.comm_hook = hook;
              c.zero = zero;
              c.world_size = n;
              c.batch_size = batch;
              c.max_steps = model == "convnet" ? o.convnet_max_steps
                                               : o.resnet18_max_steps;
              c.epochs = o.epochs;
              c.train_limit = o.train_limit;
              c.sync_gradients = sync;
              c.repeat = r;
              c.nnodes = o.nnodes;
              if (o.nnodes > 1) c.master_addr = o.master_addr;
              c.master_port = first_port == 0 ? 0 : first_port + slot;
              c.train_flags = train_flags;
              c.trace = o.trace && impl == "dtrain";
              // Rotated from repeat to repeat: each repeat runs every
              // instrumentation once, and none always runs first (a
              // position in the interleave is worth a few percent on a busy
              // machine).
              c.instrumentation =
                  instrumentation < 0
                      ? std::string(kDefaultInstrumentation)
                      : o.instrumentation[(instrumentation + r) % variants];
              group.push_back(c);
            }
          }
        }
        // Repeat 0 of every implementation with and without sync, then
        // repeat 1, ...: a shared machine's drift then touches each ratio's
        // two sides alike, instead of all repeats of one side running first.
        // Ports stay with their runs, so every node still agrees.
        std::stable_sort(group.begin(), group.end(),
                         [](const RunConfig& a, const RunConfig& b) {
                           return a.repeat < b.repeat;
                         });
        plan.runs.insert(plan.runs.end(), group.begin(), group.end());
      }
    }
  }
  if (first_port != 0 && slot > 0 && first_port + slot - 1 > 65535) {
    return Invalid("master_port",
                   absl::StrCat(first_port, ": the sweep's ", slot,
                                " runs need ports up to ",
                                first_port + slot - 1, ", beyond 65535"));
  }
  return plan;
}

}  // namespace dtrain::experiments
