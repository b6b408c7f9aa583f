#include "experiments/plots.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/types/optional.h"
#include "base/status_macros.h"
#include "experiments/sweep.h"

namespace dtrain::experiments {
namespace {

bool Executable(const std::string& path) {
  return ::access(path.c_str(), X_OK) == 0;
}

std::string FindGnuplot() {
  for (const char* dir : {"/usr/bin", "/usr/local/bin", "/bin"}) {
    const std::string path = absl::StrCat(dir, "/gnuplot");
    if (Executable(path)) return path;
  }
  return "";
}

// A gnuplot double-quoted string: "\n" breaks the line.
std::string Quote(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string Value(const absl::optional<double>& v, double scale,
                  const char* format) {
  return v ? absl::StrFormat(format, scale * *v) : std::string("-");
}

// One row as a line of a data file (PlotSpec's columns).
std::string DataLine(const ResultRow& r) {
  absl::optional<double> lo, hi;
  if (r.speedup_baseline && !r.run_samples_per_second.empty()) {
    const auto [min, max] = std::minmax_element(
        r.run_samples_per_second.begin(), r.run_samples_per_second.end());
    lo = *min / *r.speedup_baseline;
    hi = *max / *r.speedup_baseline;
  }
  const double n = r.world_size;
  return absl::StrCat(
      r.world_size, " ", Value(r.speedup, 1, "%.4f"), " ", Value(lo, 1, "%.4f"),
      " ", Value(hi, 1, "%.4f"), " ", Value(r.efficiency, 100, "%.2f"), " ",
      Value(lo, 100 / n, "%.2f"), " ", Value(hi, 100 / n, "%.2f"), " ",
      Value(r.communication_efficiency, 100, "%.2f"), "\n");
}

absl::Status WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

absl::Status RunGnuplot(const std::string& gnuplot,
                        const std::string& script_path) {
  const std::string command =
      absl::StrCat(gnuplot, " '", script_path, "' 2>&1");
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) {
    return absl::InternalError(absl::StrCat("cannot run ", gnuplot));
  }
  std::string output;
  char buffer[512];
  while (std::fgets(buffer, sizeof(buffer), pipe) != nullptr) output += buffer;
  if (::pclose(pipe) != 0) {
    return absl::InternalError(
        absl::StrCat("gnuplot failed on ", script_path, ": ", output));
  }
  return absl::OkStatus();
}

}  // namespace

std::string GnuplotScript(const PlotSpec& spec) {
  static const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c",
                                        "#9467bd", "#ff7f0e", "#8c564b"};
  auto color = [](size_t i) {
    return absl::StrCat("lc rgb '", kColors[i % 6], "'");
  };
  std::string s = absl::StrCat(
      "set terminal pngcairo noenhanced size 1500,560 font 'sans,11'\n",
      "set output ", Quote(spec.png_path), "\n",
      "set multiplot layout 1,3 title ", Quote(spec.title), " font 'sans,13'\n",
      "set grid\nset xlabel 'processes'\nset xtics 1\n",
      "set offsets 0.2, 0.2, 0, 0\nset datafile missing '-'\n");
  if (spec.cores_marker > 0) {
    const double x = spec.cores_marker + 0.5;
    s += absl::StrCat(
        "set arrow from ", x, ", graph 0 to ", x,
        ", graph 1 nohead dt 3 lw 2 lc rgb '#aa0000'\n", "set label ",
        Quote(absl::StrCat("> ", spec.cores_per_node, " cores")), " at ", x,
        ", graph 0.97 offset 0.5,0 tc rgb '#aa0000'\n");
  }
  // The points, with min-max bars where measured.
  auto lines = [&](int col, int lo, int hi, const std::string& suffix) {
    std::string out;
    for (size_t i = 0; i < spec.lines.size(); ++i) {
      const PlotSpec::Line& l = spec.lines[i];
      out += absl::StrCat(", ", Quote(l.data_file), " using 1:", col);
      if (spec.error_bars && lo > 0) {
        out +=
            absl::StrCat(":", lo, ":", hi, " title ", Quote(l.title + suffix),
                         " with yerrorlines lw 2 pt 7 ", color(i));
      } else {
        out += absl::StrCat(" title ", Quote(l.title + suffix),
                            " with linespoints lw 2 pt 7 ", color(i));
      }
    }
    return out;
  };
  s += "set key top left\nset ylabel 'speedup over the baseline'\n"
       "set yrange [0:*]\n";
  s += "plot x title 'ideal' with lines dt 2 lc rgb '#888888'" +
       lines(2, 3, 4, "") + "\n";
  // Percent panels from 0, with room above the 100% line and any point.
  s += "set key bottom left\nset ylabel 'efficiency: speedup / processes (%)'"
       "\nset yrange [0:*]\nset offsets 0.2, 0.2, 10, 0\n";
  s += "plot 100 title 'ideal' with lines dt 2 lc rgb '#888888'" +
       lines(5, 6, 7, "") + "\n";
  s += "set ylabel 'vs no-comm bound (%)'\n";
  s += "plot 100 title 'no-comm bound' with lines dt 2 lc rgb '#888888'" +
       lines(8, 0, 0, "") + "\n";
  s += "unset multiplot\n";
  return s;
}

absl::StatusOr<std::vector<std::string>> WritePlots(
    const std::vector<ResultRow>& rows, const Machine& machine,
    const std::string& dir) {
  const std::string gnuplot = FindGnuplot();
  if (gnuplot.empty()) {
    return absl::FailedPreconditionError(
        "gnuplot is not installed (Debian package gnuplot-nox; tools/setup.sh "
        "installs it); the table, results.csv and results.json are written, "
        "the plots are not");
  }
  ::mkdir(dir.c_str(), 0755);
  const std::vector<SpeedupBaseline> baselines = SpeedupBaselines(rows);
  const std::string repeats = DescribeRepeats(rows);
  const bool spread = repeats != "single run per configuration";
  std::string nodes;
  if (machine.nnodes > 1) {
    nodes = machine.nodes_share_cores
                ? absl::StrCat(machine.nnodes, " nodes on one machine of ")
                : absl::StrCat(machine.nnodes, " nodes of ");
  }
  const std::string about = absl::StrCat(
      nodes, DescribeCores(machine), "; ",
      spread ? absl::StrCat(repeats, " per point, bars: min to max")
             : std::string("single run per point (--repeats=1): no spread"));
  auto baseline_text = [&](const std::string& model) {
    std::vector<std::string> parts;
    for (const SpeedupBaseline& b : baselines) {
      if (b.model != model) continue;
      parts.push_back(absl::StrFormat(
          "%s%s%s%s's one-process %.0f samples/s", b.implementation,
          b.comm_hook == kDefaultCommHook ? "" : " ",
          b.comm_hook == kDefaultCommHook ? "" : b.comm_hook,
          b.device == "cuda" ? " (cuda)" : "", b.samples_per_second));
    }
    return parts.empty() ? std::string("no one-process run")
                         : absl::StrJoin(parts, ", ");
  };

  // model -> "impl backend" -> rows, and backend_model -> impl -> rows, in
  // the rows' order.
  std::map<std::string, std::vector<std::pair<std::string, std::string>>>
      by_model;  // model -> (line title, slug)
  std::map<std::string, std::vector<const ResultRow*>> by_line;
  std::map<std::string, std::vector<std::pair<std::string, std::string>>>
      by_backend;  // backend_model -> (impl, slug)
  std::vector<std::string> models, backend_models;
  std::map<std::string, int> most_procs;
  for (const ResultRow& r : rows) {
    // The instrumentation's runs measure its cost (the table), not scaling.
    if (r.runs == 0 || r.instrumentation != kDefaultInstrumentation) continue;
    // A hook other than the default, or a ZeRO stage, is a line of its own.
    const std::string hook =
        absl::StrCat(r.comm_hook == kDefaultCommHook ? "" : r.comm_hook,
                     r.comm_hook != kDefaultCommHook && r.zero != 0 ? " " : "",
                     r.zero == 0 ? "" : absl::StrCat("zero", r.zero));
    const std::string slug = absl::StrCat(
        r.backend, "_", r.model, "_", r.implementation, hook.empty() ? "" : "_",
        absl::StrReplaceAll(hook, {{" ", "_"}}));
    if (by_line.find(slug) == by_line.end()) {
      if (by_model.find(r.model) == by_model.end()) models.push_back(r.model);
      by_model[r.model].push_back(
          {absl::StrCat(r.implementation, " ", r.backend,
                        hook.empty() ? "" : " ", hook),
           slug});
      const std::string bm = absl::StrCat(r.backend, "_", r.model);
      if (by_backend.find(bm) == by_backend.end()) backend_models.push_back(bm);
      by_backend[bm].push_back(
          {absl::StrCat(r.implementation, hook.empty() ? "" : " ", hook),
           slug});
    }
    by_line[slug].push_back(&r);
    most_procs[r.model] = std::max(most_procs[r.model], r.world_size);
  }
  // A comparison's lines by implementation, then backend.
  for (auto& [model, ls] : by_model) std::sort(ls.begin(), ls.end());
  // One data file per line, shared by both kinds of plot.
  for (const auto& [slug, line_rows] : by_line) {
    std::string text =
        "# processes speedup speedup_min speedup_max efficiency% "
        "efficiency_min% efficiency_max% vs_no_comm%\n";
    for (const ResultRow* r : line_rows) text += DataLine(*r);
    DTRAIN_RETURN_IF_ERROR(
        WriteText(absl::StrCat(dir, "/", slug, ".dat"), text));
  }
  // The x axis counts all processes: where they outnumber the cores.
  const int cores_total = machine.nodes_share_cores
                              ? machine.cores
                              : machine.cores * std::max(machine.nnodes, 1);
  auto draw = [&](const std::string& name, const std::string& title,
                  const std::vector<std::pair<std::string, std::string>>& ls,
                  int procs) -> absl::StatusOr<std::string> {
    PlotSpec spec;
    spec.title = title;
    spec.png_path = absl::StrCat(dir, "/", name, ".png");
    for (const auto& [line_title, slug] : ls)
      spec.lines.push_back({line_title, absl::StrCat(dir, "/", slug, ".dat")});
    spec.error_bars = spread;
    if (machine.cores > 0 && procs > cores_total) {
      spec.cores_marker = cores_total;
      spec.cores_per_node = machine.cores;
    }
    const std::string script = absl::StrCat(dir, "/", name, ".gp");
    DTRAIN_RETURN_IF_ERROR(WriteText(script, GnuplotScript(spec)));
    DTRAIN_RETURN_IF_ERROR(RunGnuplot(gnuplot, script));
    return spec.png_path;
  };
  std::vector<std::string> written;
  for (const std::string& model : models) {
    DTRAIN_ASSIGN_OR_RETURN(
        std::string png,
        draw(absl::StrCat("compare_", model),
             absl::StrCat(model,
                          ": every implementation and backend, speedup over ",
                          baseline_text(model), "\n", about),
             by_model[model], most_procs[model]));
    written.push_back(png);
  }
  for (const std::string& bm : backend_models) {
    const std::vector<const ResultRow*>& first =
        by_line[by_backend[bm][0].second];
    const std::string& model = first[0]->model;
    DTRAIN_ASSIGN_OR_RETURN(
        std::string png,
        draw(bm,
             absl::StrCat(model, " on ", first[0]->backend, ", speedup over ",
                          baseline_text(model), "\n", about),
             by_backend[bm], most_procs[model]));
    written.push_back(png);
  }
  return written;
}

}  // namespace dtrain::experiments
