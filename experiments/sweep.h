// The scaling sweep's plan: which trainings to run, from the runner's flags.
// For each implementation (ours, optionally PyTorch's), backend, model and
// process count it runs the training with gradient averaging, and for more
// than one process also without (the no-communication bound), `repeats`
// times each.
#ifndef DTRAIN_EXPERIMENTS_SWEEP_H_
#define DTRAIN_EXPERIMENTS_SWEEP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dtrain::experiments {

struct SweepOptions {
  std::vector<std::string> backends = {"gloo"};
  std::vector<std::string> models = {"convnet", "resnet18"};
  std::vector<int> world_sizes = {1, 2, 4};
  // Per process, one per world size (or one for all). Ignored when
  // global_batch > 0.
  std::vector<int64_t> batch_sizes = {128, 64, 32};
  // > 0: every run has this global batch, split over its processes.
  int64_t global_batch = 0;
  int64_t epochs = 1;
  // Per model: steps per run (0: whole epochs). Unset models: convnet whole
  // epochs, resnet18 8 steps (a short run on small images).
  int64_t convnet_max_steps = 0;
  int64_t resnet18_max_steps = 8;
  // Examples of the training split to use (0: all).
  int64_t train_limit = 0;
  int repeats = 1;
  // Measure the no-communication bound (world size > 1 only).
  bool bound = true;
  // Also run the PyTorch reference script.
  bool reference_pytorch = false;
  // CUDA devices visible: NCCL runs need world_size of them at most.
  int cuda_devices = 0;
};

struct RunConfig {
  std::string implementation;  // "dtrain" or "pytorch"
  std::string backend;
  std::string model;
  int world_size = 1;
  int64_t batch_size = 0;  // per process
  int64_t max_steps = 0;   // 0: whole epochs
  int64_t epochs = 1;
  int64_t train_limit = 0;
  bool sync_gradients = true;
  int repeat = 0;

  // "dtrain gloo convnet np=2 bs=64" (+ " no-sync", " #2").
  std::string Name() const;
  // A file-name-safe form: "dtrain_gloo_convnet_np2_bs64_sync_r0".
  std::string Slug() const;
};

struct Skipped {
  std::string what;  // "nccl"
  std::string why;
};

struct SweepPlan {
  std::vector<RunConfig> runs;
  std::vector<Skipped> skipped;
};

// kInvalidArgument naming the flag for: an unknown backend or model, world
// sizes below 1, a batch list whose length is neither 1 nor that of the
// world sizes, a global batch not divisible by a world size, repeats < 1.
absl::StatusOr<SweepPlan> PlanSweep(const SweepOptions& options);

}  // namespace dtrain::experiments

#endif  // DTRAIN_EXPERIMENTS_SWEEP_H_
