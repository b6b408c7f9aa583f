// PNG plots of the sweep, drawn by gnuplot (Debian's gnuplot-nox, cairo
// terminal). Per model, a comparison: every implementation, backend and
// communication hook side by side (dtrain gloo, dtrain gloo+shm, pytorch
// gloo, dtrain gloo fp16, ...). Per backend and model, its implementations
// and hooks. Each has three panels against processes: speedup over the
// model's baseline (with the ideal line), efficiency, and throughput against
// the no-communication bound; titles name the machine's cores and the
// repeats ("single run per point", or min-max bars), and a dotted line marks
// where the processes outnumber the cores.
#ifndef DTRAIN_EXPERIMENTS_PLOTS_H_
#define DTRAIN_EXPERIMENTS_PLOTS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "experiments/results.h"

namespace dtrain::experiments {

// One plot. Each line's data file has the columns: processes, speedup, its
// min and max over repeats, efficiency (%), its min and max, vs no-comm (%);
// "-" where a value is missing.
struct PlotSpec {
  std::string title;  // may hold "\n"
  std::string png_path;
  struct Line {
    std::string title;
    std::string data_file;
  };
  std::vector<Line> lines;
  // Min-max bars from the data's columns 3-4 and 6-7 (repeats > 1).
  bool error_bars = false;
  // > 0: a dotted vertical line after this many processes (the cores of the
  // sweep's nodes together), labelled with the cores per node.
  int cores_marker = 0;
  int cores_per_node = 0;
};

// The gnuplot script that draws `spec`.
std::string GnuplotScript(const PlotSpec& spec);

// Writes <dir>/compare_<model>.png for every model and
// <dir>/<backend>_<model>.png for every backend and model with rows (their
// data files and scripts beside them), and returns the PNGs' paths,
// comparisons first. kFailedPrecondition when gnuplot is missing (naming
// the package to install), kInternal with its output when it fails.
absl::StatusOr<std::vector<std::string>> WritePlots(
    const std::vector<ResultRow>& rows, const Machine& machine,
    const std::string& dir);

}  // namespace dtrain::experiments

#endif  // DTRAIN_EXPERIMENTS_PLOTS_H_
