// The sweep's results: repeats combined into one row per configuration
// (median and spread), speedup against one process, and both efficiencies;
// printed as a table and written as CSV and JSON.
// The CSV's columns and units: docs/FORMATS.md.
//
//   speedup                   samples/s(N processes) / samples/s(1 process),
//                             same implementation, backend and model
//   efficiency                speedup / N
//   communication efficiency  samples/s with gradient averaging / samples/s
//                             of the same processes without it (the
//                             no-communication bound): how close DDP gets to
//                             what this machine allows
#ifndef DTRAIN_EXPERIMENTS_RESULTS_H_
#define DTRAIN_EXPERIMENTS_RESULTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/optional.h"
#include "experiments/run_training.h"

namespace dtrain::experiments {

struct ResultRow {
  std::string implementation;
  std::string backend;
  std::string model;
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
  // (max - min) / median of samples/s over repeats; 0 for one repeat.
  double spread = 0;
  absl::optional<double> speedup;
  absl::optional<double> efficiency;
  absl::optional<double> bound_samples_per_second;
  absl::optional<double> bound_epoch_seconds;
  absl::optional<double> communication_efficiency;
  // exposed communication / epoch seconds.
  double exposed_share = 0;
  // Summed over repeats.
  std::vector<int64_t> step_histogram;
  double step_seconds_sum = 0;
};

// One row per (implementation, backend, model, world size, batch size) of
// the synchronised runs, in the order they first appear; the no-sync runs
// fill the bound columns.
std::vector<ResultRow> Summarize(const std::vector<RunRecord>& records);

// The final table, aligned, with a header line.
std::string FormatTable(const std::vector<ResultRow>& rows);

std::string ToCsv(const std::vector<ResultRow>& rows);
std::string ToJson(const std::vector<ResultRow>& rows,
                   const std::vector<RunRecord>& records,
                   const std::vector<std::string>& skipped);

}  // namespace dtrain::experiments

#endif  // DTRAIN_EXPERIMENTS_RESULTS_H_
