// The sweep's results as files: table.txt, results.csv and results.json
// (their formats: docs/FORMATS.md).
#ifndef DTRAIN_EXPERIMENTS_RESULTS_FILES_H_
#define DTRAIN_EXPERIMENTS_RESULTS_FILES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "experiments/results.h"
#include "experiments/run_training.h"

namespace dtrain::experiments {

// Writes <dir>/table.txt (TableText), results.csv and results.json, each
// atomically, and returns their paths in that order. Stops at the first
// that cannot be written, with its error.
absl::StatusOr<std::vector<std::string>> WriteResults(
    const std::string& dir, const std::vector<ResultRow>& rows,
    const std::vector<RunRecord>& records,
    const std::vector<std::string>& skipped, const Machine& machine);

std::string ToCsv(const std::vector<ResultRow>& rows);
std::string ToJson(const std::vector<ResultRow>& rows,
                   const std::vector<RunRecord>& records,
                   const std::vector<std::string>& skipped,
                   const Machine& machine);

}  // namespace dtrain::experiments

#endif  // DTRAIN_EXPERIMENTS_RESULTS_FILES_H_
