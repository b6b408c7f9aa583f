// Runs one training of the sweep as real processes through the launcher
// (`launch --nproc_per_node=N -- train ...`, or the PyTorch reference script
// in place of `train`), measures its wall time from outside, and reads what
// the training measured inside from its metrics file. On a sweep over
// several nodes each node runs its share of the ranks; node 0 holds rank 0,
// which writes the metrics, so only node 0 measures. Also asks the programs
// what they can do (CUDA devices, the Python torch's CUDA and NCCL).
#ifndef DTRAIN_EXPERIMENTS_RUN_TRAINING_H_
#define DTRAIN_EXPERIMENTS_RUN_TRAINING_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "experiments/sweep.h"

namespace dtrain::experiments {

struct Programs {
  std::string launch;            // //tools:launch
  std::string train;             // //trainer:train
  std::string python;            // /usr/bin/python3 (PyTorch reference)
  std::string reference_script;  // experiments/pytorch_reference.py
};

struct RunRecord {
  RunConfig config;
  bool ok = false;
  // Why it failed: the exit status and the end of its log.
  std::string error;
  std::string log_path;
  std::string metrics_path;
  // From outside: fork to exit, start-up included.
  double wall_seconds = 0;
  // From inside (the metrics file), summed over the run's epochs.
  double epoch_seconds = 0;
  int64_t samples = 0;
  int64_t steps = 0;
  double samples_per_second = 0;
  double startup_seconds = 0;
  double exposed_communication_seconds = 0;
  double data_seconds = 0;
  double step_seconds_p50 = 0;
  double step_seconds_p90 = 0;
  // Over trainer/report/run_metrics.h's StepHistogramBounds().
  std::vector<int64_t> step_histogram;
  double step_seconds_sum = 0;
  // The largest over the ranks, at the end; 0 where the metrics do not say
  // (files from before they were measured).
  int64_t optimizer_state_bytes = 0;
  int64_t peak_rss_bytes = 0;
};

// The command line that runs this node's share of `config` (for logs and for
// tests): config.ProcessesPerNode() ranks, and with config.nnodes > 1 the
// launcher's --nnodes, --node_rank and --master_addr; the training's flags,
// --comm_hook for a hook other than the default, --zero for a ZeRO stage,
// then config.train_flags.
// An empty `metrics_path` asks for no metrics file.
std::vector<std::string> TrainingCommand(const RunConfig& config,
                                         const Programs& programs,
                                         int node_rank,
                                         const std::string& metrics_path,
                                         int master_port);

// Runs this node's share of `config` on config.master_port (0: a free local
// port), writing its output to <dir>/logs/<slug>.log and, on node 0, its
// metrics to <dir>/runs/<slug>.json. A training that fails, or runs past
// `timeout` (its processes are then stopped), gives a record with ok = false;
// errors only for what prevents starting it. On other nodes a run that exits
// 0 is ok with no measurements. `tick` is called about every 100 ms while it
// runs (for a live display).
absl::StatusOr<RunRecord> RunTraining(
    const RunConfig& config, const Programs& programs, int node_rank,
    const std::string& dir, absl::Duration timeout,
    const std::function<void(absl::Duration)>& tick);

// Reads a metrics file (trainer/report/run_metrics.h's JSON) into `record`.
absl::Status ReadMetrics(const std::string& path, RunRecord* record);

// CUDA devices that programs.train's LibTorch sees; 0 when it has no CUDA or
// cannot run.
int CountCudaDevices(const Programs& programs);

// Asks the Python torch beside programs.reference_script (its --probe) what
// it can do. kFailedPrecondition, with the script's last words, when it
// cannot run or import torch.
absl::StatusOr<PythonTorch> ProbePythonTorch(const Programs& programs);

// The probe's output: one JSON line {"torch": "1.13.1", "cuda": null or
// "12.4", "cuda_devices": 0, "nccl": false, "gloo_float16": true,
// "gloo_bfloat16": false} (the last two optional: true when absent).
// kInvalidArgument otherwise.
absl::StatusOr<PythonTorch> ParsePythonTorchProbe(const std::string& text);

}  // namespace dtrain::experiments

#endif  // DTRAIN_EXPERIMENTS_RUN_TRAINING_H_
