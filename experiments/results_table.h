// The sweep's results as text: the final table (printed and saved as
// table.txt) and //experiments:sim_cluster's combined table of its CSV.
#ifndef DTRAIN_EXPERIMENTS_RESULTS_TABLE_H_
#define DTRAIN_EXPERIMENTS_RESULTS_TABLE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "experiments/results.h"

namespace dtrain::experiments {

// The final table as printed and saved (table.txt): a header naming the
// machine's cores, the repeats (or "single run"), each model's speedup
// baseline and the flags every training had (if any); the aligned table, a
// row per configuration with its hook, a process count beyond the cores
// marked with '*'; then a legend of the columns, including why "vs no-comm"
// can exceed 100%.
std::string FormatTable(const std::vector<ResultRow>& rows,
                        const Machine& machine);

// FormatTable's text followed by a "skipped WHAT: WHY" line per skipped
// configuration: what the sweep prints and saves as table.txt.
std::string TableText(const std::vector<ResultRow>& rows,
                      const Machine& machine,
                      const std::vector<std::string>& skipped);

// //experiments:sim_cluster's combined table, printed at its end: a line per
// row of its combined CSV (every link rate's results.csv rows, with
// link_rate, measured_link_gbit, hosts and ranks_per_host in front), aligned
// as FormatTable's, with the hook and the communication per step where the
// CSV has them (sweeps before hooks did not); then where the CSV is, and the
// cores of the machine every simulated host shares, with a note where a run
// had more ranks. `csv` is the file's text (\n or \r\n line ends, no quoted
// fields), `csv_path` where it is. Errors for a missing column, a field that
// does not parse, or no rows.
absl::StatusOr<std::string> ClusterTableText(absl::string_view csv,
                                             const std::string& csv_path,
                                             const Machine& machine);

// ClusterTableText of the file at `csv_path`.
absl::StatusOr<std::string> ReadClusterTable(const std::string& csv_path,
                                             const Machine& machine);

}  // namespace dtrain::experiments

#endif  // DTRAIN_EXPERIMENTS_RESULTS_TABLE_H_
