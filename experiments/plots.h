// PNG plots of the sweep, drawn by gnuplot (Debian's gnuplot-nox, cairo
// terminal): for each backend and model, speedup against processes (with the
// ideal line) and both efficiencies against processes, one line per
// implementation.
#ifndef DTRAIN_EXPERIMENTS_PLOTS_H_
#define DTRAIN_EXPERIMENTS_PLOTS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "experiments/results.h"

namespace dtrain::experiments {

// The gnuplot script for one backend and model; data files are written next
// to `png_path` by WritePlots.
std::string GnuplotScript(const std::string& title, const std::string& png_path,
                          const std::vector<std::string>& data_files,
                          const std::vector<std::string>& implementations);

// Writes <dir>/<backend>_<model>.png for every backend and model with rows,
// and returns their paths. kFailedPrecondition when gnuplot is missing
// (naming the package to install), kInternal with its output when it fails.
absl::StatusOr<std::vector<std::string>> WritePlots(
    const std::vector<ResultRow>& rows, const std::string& dir);

}  // namespace dtrain::experiments

#endif  // DTRAIN_EXPERIMENTS_PLOTS_H_
