// The sweep's results: repeats combined into one row per configuration
// (implementation, backend, model, communication hook, processes, batch;
// median and spread), speedup against one baseline per model, both
// efficiencies and the time communication adds to a step; the machine they
// ran on. Printed as a table by results_table.h and written as CSV and JSON
// by results_files.h (the CSV's columns and units: docs/FORMATS.md).
//
//   speedup                   samples/s(N processes) / the model's baseline
//                             (SpeedupBaseline below), the same for every
//                             implementation, backend and hook of the model
//   efficiency                speedup / N
//   communication efficiency  samples/s with gradient averaging / samples/s
//                             of the same processes without it (the
//                             no-communication bound, a separate run shared
//                             by every hook): how close DDP gets to what
//                             this machine allows
//   communication per step    step time with gradient averaging - the
//                             bound's (epoch seconds / steps, each the
//                             median over repeats): what communication adds
#ifndef DTRAIN_EXPERIMENTS_RESULTS_H_
#define DTRAIN_EXPERIMENTS_RESULTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/optional.h"
#include "experiments/run_training.h"
#include "experiments/sweep.h"

namespace dtrain::experiments {

struct ResultRow {
  std::string implementation;
  std::string backend;
  std::string model;
  std::string comm_hook = kDefaultCommHook;
  int zero = 0;  // ZeRO stage
  // kInstrumentations (sweep.h): how the runs observed themselves.
  std::string instrumentation = kDefaultInstrumentation;
  int world_size = 1;
  int64_t batch_size = 0;
  int runs = 0;       // successful repeats
  int failed = 0;     // failed repeats
  std::string error;  // the first failure, if any
  // Medians over the successful repeats.
  double epoch_seconds = 0;
  double samples_per_second = 0;
  double wall_seconds = 0;
  double startup_seconds = 0;
  double exposed_communication_seconds = 0;
  double data_seconds = 0;
  double step_seconds_p50 = 0;
  // Epoch seconds / steps, all of the run's epochs.
  double step_seconds = 0;
  // (max - min) / median of samples/s over repeats; 0 for one repeat.
  double spread = 0;
  // Each successful repeat's samples/s, in run order.
  std::vector<double> run_samples_per_second;
  // The samples/s `speedup` divides by: the model's baseline.
  absl::optional<double> speedup_baseline;
  absl::optional<double> speedup;
  absl::optional<double> efficiency;
  // The no-communication bound: the no-sync runs of the same
  // implementation, backend, model, processes and batch (every hook's). One
  // process communicates nothing: there the default hook's row is the bound
  // (itself, or for another hook what that hook adds by itself).
  absl::optional<double> bound_samples_per_second;
  absl::optional<double> bound_epoch_seconds;
  absl::optional<double> bound_step_seconds;
  absl::optional<double> bound_step_seconds_p50;
  absl::optional<double> communication_efficiency;
  // What communication adds to a step: step_seconds - bound_step_seconds,
  // and the same of the median steps (step_seconds_p50); negative where the
  // noise of the two runs is larger.
  absl::optional<double> communication_seconds_per_step;
  absl::optional<double> communication_seconds_per_step_p50;
  // exposed communication / epoch seconds.
  double exposed_share = 0;
  // Summed over repeats.
  std::vector<int64_t> step_histogram;
  double step_seconds_sum = 0;
  // Medians over the successful repeats of the largest rank's optimizer
  // state and peak resident memory (0 where the metrics do not say).
  int64_t optimizer_state_bytes = 0;
  int64_t peak_rss_bytes = 0;
  // The flags every training of the sweep had beyond its own (the knobs,
  // --train_flags): RunConfig::train_flags of its first run.
  std::vector<std::string> train_flags;
};

// What every speedup of a model divides by, one per model and device (cpu:
// gloo, gloo+shm, shm; cuda: nccl): the fastest implementation's one-process
// samples/s with the default hook (allreduce), each implementation's being
// the median over its successful one-process runs of every backend on that
// device. One process communicates nothing, so those runs are the same
// training, and one baseline keeps a backend's speedup from moving with the
// noise of its own one-process run; PyTorch's rows share it, so its lines
// and ours compare in absolute terms (its one-process row may then be below
// 1.00x). Every hook's rows share it too: a hook's speedup then says whether
// it trains faster than plain averaging, its one-process row what the hook
// costs by itself. A sweep without the default hook has one baseline per
// hook instead, from that hook's own one-process runs. ZeRO's rows share
// their hook's baseline, set by the runs without ZeRO.
struct SpeedupBaseline {
  std::string model;
  std::string device;          // "cpu" or "cuda"
  std::string comm_hook;       // whose one-process runs set it
  std::string implementation;  // whose one-process runs set it
  double samples_per_second = 0;
  int runs = 0;  // one-process runs pooled
};

// From the rows' one-process runs; none for a model and device without a
// successful one-process run (their speedups stay empty).
std::vector<SpeedupBaseline> SpeedupBaselines(
    const std::vector<ResultRow>& rows);

// The baseline a row's speedup divides by: its model's and device's, the
// default hook's or its own hook's; null when there is none.
const SpeedupBaseline* BaselineOf(const ResultRow& row,
                                  const std::vector<SpeedupBaseline>& all);

// The row's hook, ZeRO stage and instrumentation as the table shows them:
// "allreduce", "fp16", "allreduce zero1", "allreduce trace".
std::string Variant(const ResultRow& row);

// "cpu" or "cuda": the device a backend trains on.
std::string DeviceOf(const std::string& backend);

// One row per (implementation, backend, model, hook, ZeRO stage, world size,
// batch size) of the synchronised runs, in the order they first appear; the
// no-sync runs fill the bound columns of every hook's row, SpeedupBaselines
// the speedups.
std::vector<ResultRow> Summarize(const std::vector<RunRecord>& records);

// The machine the runs shared (node 0's on several nodes): speedups beyond
// its cores measure the machine, not the backend.
struct Machine {
  int cores = 0;          // CPUs this process may run on; 0: unknown
  std::string cpu_model;  // /proc/cpuinfo's model name; empty: unknown
  int nnodes = 1;         // nodes the sweep spans, processes spread evenly
  // Every node runs on this one machine (the simulated cluster): all of a
  // run's processes share its cores.
  bool nodes_share_cores = false;
};

// This process's machine: its CPU affinity's count (sysconf's otherwise)
// and the first "model name" of /proc/cpuinfo.
Machine ThisMachine(int nnodes);

// "2 cores (AMD EPYC)", "2 cores", "unknown cores".
std::string DescribeCores(const Machine& machine);

// The processes of a `world_size` run that share one machine's cores.
int ProcessesPerMachine(const Machine& machine, int world_size);

// Whether those are more than the cores.
bool Oversubscribed(const Machine& machine, int world_size);

// How the rows' runs were repeated: "single run per configuration" when
// every row has at most one, else "median of up to N runs".
std::string DescribeRepeats(const std::vector<ResultRow>& rows);

}  // namespace dtrain::experiments

#endif  // DTRAIN_EXPERIMENTS_RESULTS_H_
