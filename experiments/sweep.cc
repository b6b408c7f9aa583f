#include "experiments/sweep.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/machine_limits.h"
#include "base/status_macros.h"

namespace dtrain::experiments {
namespace {

absl::Status Invalid(absl::string_view flag, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", why));
}

// Each repeat runs every configuration again; the plan holds them all.
constexpr int kMaxRepeats = 1000;

}  // namespace

int64_t DefaultBatchSize(int world_size) {
  return world_size >= kDefaultGlobalBatch
             ? 1
             : kDefaultGlobalBatch / std::max(world_size, 1);
}

std::string RunConfig::Name() const {
  return absl::StrCat(implementation, " ", backend, " ", model,
                      " np=", world_size, " bs=", batch_size,
                      sync_gradients ? "" : " no-sync",
                      repeat > 0 ? absl::StrCat(" #", repeat + 1) : "");
}

std::string RunConfig::Slug() const {
  return absl::StrCat(implementation, "_", backend, "_", model, "_np",
                      world_size, "_bs", batch_size,
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
          for (bool sync : {true, false}) {
            if (!sync && (n == 1 || !o.bound)) continue;
            for (int r = 0; r < o.repeats; ++r, ++slot) {
              if (skipped) continue;
              RunConfig c;
              c.implementation = impl;
              c.backend = backend;
              c.model = model;
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
