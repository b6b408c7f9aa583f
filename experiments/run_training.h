// Runs one training of the sweep as real processes through the launcher
// (`launch --nproc_per_node=N -- train ...`, or the PyTorch reference script
// in place of `train`), measures its wall time from outside, and reads what
// the training measured inside from its metrics file.
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
  // Over trainer/run_metrics.h's StepHistogramBounds().
  std::vector<int64_t> step_histogram;
  double step_seconds_sum = 0;
};

// The command line that runs `config` (for logs and for tests).
std::vector<std::string> TrainingCommand(const RunConfig& config,
                                         const Programs& programs,
                                         const std::string& metrics_path,
                                         int master_port);

// Runs `config`, writing its output to <dir>/logs/<slug>.log and its metrics
// to <dir>/runs/<slug>.json. A training that fails, or runs past `timeout`
// (its processes are then stopped), gives a record with ok = false; errors
// only for what prevents starting it. `tick` is called about every 100 ms
// while it runs (for a live display).
absl::StatusOr<RunRecord> RunTraining(
    const RunConfig& config, const Programs& programs, const std::string& dir,
    absl::Duration timeout, const std::function<void(absl::Duration)>& tick);

// Reads a metrics file (trainer/run_metrics.h's JSON) into `record`.
absl::Status ReadMetrics(const std::string& path, RunRecord* record);

}  // namespace dtrain::experiments

#endif  // DTRAIN_EXPERIMENTS_RUN_TRAINING_H_
