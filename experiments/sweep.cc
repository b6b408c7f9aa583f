#include "experiments/sweep.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace dtrain::experiments {
namespace {

absl::Status Invalid(absl::string_view flag, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", why));
}

}  // namespace

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
  if (o.global_batch <= 0 && o.batch_sizes.size() != 1 &&
      o.batch_sizes.size() != o.world_sizes.size()) {
    return Invalid(
        "batch_sizes",
        absl::StrCat("give one size or one per world size (",
                     o.world_sizes.size(), "), not ", o.batch_sizes.size()));
  }
  for (int64_t b : o.batch_sizes) {
    if (b < 1) return Invalid("batch_sizes", absl::StrCat(b, " is not >= 1"));
  }
  if (o.repeats < 1) return Invalid("repeats", "must be >= 1");
  if (o.epochs < 1) return Invalid("epochs", "must be >= 1");
  if (o.models.empty()) return Invalid("models", "empty");
  if (o.backends.empty()) return Invalid("backends", "empty");

  SweepPlan plan;
  std::vector<std::string> implementations = {"dtrain"};
  if (o.reference_pytorch) implementations.push_back("pytorch");
  for (const std::string& backend : o.backends) {
    if (backend != "gloo" && backend != "nccl") {
      return Invalid("backends", absl::StrCat("unknown backend '", backend,
                                              "'; known: gloo, nccl"));
    }
  }
  for (const std::string& model : o.models) {
    if (model != "convnet" && model != "resnet18") {
      return Invalid("models", absl::StrCat("unknown model '", model,
                                            "'; known: convnet, resnet18"));
    }
  }
  for (const std::string& backend : o.backends) {
    if (backend == "nccl" && o.cuda_devices == 0) {
      plan.skipped.push_back(
          {"nccl", "no CUDA device is visible (or this LibTorch has no CUDA)"});
      continue;
    }
    for (const std::string& model : o.models) {
      for (size_t i = 0; i < o.world_sizes.size(); ++i) {
        const int n = o.world_sizes[i];
        if (backend == "nccl" && n > o.cuda_devices) {
          plan.skipped.push_back({absl::StrCat("nccl np=", n),
                                  absl::StrCat("needs ", n, " CUDA devices, ",
                                               o.cuda_devices, " visible")});
          continue;
        }
        int64_t batch = 0;
        if (o.global_batch > 0) {
          if (o.global_batch % n != 0) {
            return Invalid(
                "global_batch",
                absl::StrCat(o.global_batch, " does not split evenly over ", n,
                             " processes"));
          }
          batch = o.global_batch / n;
        } else {
          batch =
              o.batch_sizes.size() == 1 ? o.batch_sizes[0] : o.batch_sizes[i];
        }
        for (const std::string& impl : implementations) {
          for (bool sync : {true, false}) {
            if (!sync && (n == 1 || !o.bound)) continue;
            for (int r = 0; r < o.repeats; ++r) {
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
              plan.runs.push_back(c);
            }
          }
        }
      }
    }
  }
  return plan;
}

}  // namespace dtrain::experiments
