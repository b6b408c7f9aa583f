#include "experiments/plots.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

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

}  // namespace

std::string GnuplotScript(const std::string& title, const std::string& png_path,
                          const std::vector<std::string>& data_files,
                          const std::vector<std::string>& implementations) {
  // Columns of each data file: processes, speedup, efficiency, communication
  // efficiency (percent).
  std::string s = absl::StrCat(
      "set terminal pngcairo size 1200,500 font 'sans,11'\n", "set output '",
      png_path, "'\n", "set multiplot layout 1,2 title '", title,
      "' font 'sans,14'\n",
      "set grid\nset key top left\nset xlabel 'processes'\n",
      "set xtics 1\nset offsets 0.2, 0.2, 0, 0\nset datafile missing '-'\n",
      "set ylabel 'speedup vs 1 process'\nset yrange [0:*]\n",
      "plot x title 'ideal' with lines dashtype 2 lc rgb '#888888'");
  const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd"};
  for (size_t i = 0; i < data_files.size(); ++i) {
    s += absl::StrCat(
        ", '", data_files[i], "' using 1:2 title '", implementations[i],
        "' with linespoints lw 2 pt 7 lc rgb '", colors[i % 4], "'");
  }
  s += "\nset ylabel 'efficiency (%)'\nset yrange [0:130]\nset key bottom "
       "left\n";
  s += "plot 100 title 'ideal' with lines dashtype 2 lc rgb '#888888'";
  for (size_t i = 0; i < data_files.size(); ++i) {
    s += absl::StrCat(", '", data_files[i], "' using 1:3 title '",
                      implementations[i],
                      ": speedup / processes' with linespoints lw 2 pt 7 lc "
                      "rgb '",
                      colors[i % 4], "', '", data_files[i],
                      "' using 1:4 title '", implementations[i],
                      ": vs no communication' with linespoints lw 2 pt 5 dt 3 "
                      "lc rgb '",
                      colors[i % 4], "'");
  }
  s += "\nunset multiplot\n";
  return s;
}

absl::StatusOr<std::vector<std::string>> WritePlots(
    const std::vector<ResultRow>& rows, const std::string& dir) {
  const std::string gnuplot = FindGnuplot();
  if (gnuplot.empty()) {
    return absl::FailedPreconditionError(
        "gnuplot is not installed (Debian package gnuplot-nox; tools/setup.sh "
        "installs it); the table, results.csv and results.json are written, "
        "the plots are not");
  }
  ::mkdir(dir.c_str(), 0755);
  // backend_model -> implementation -> rows.
  std::map<std::string, std::map<std::string, std::vector<const ResultRow*>>>
      groups;
  std::map<std::string, std::string> titles;
  for (const ResultRow& r : rows) {
    if (r.runs == 0) continue;
    const std::string name = absl::StrCat(r.backend, "_", r.model);
    groups[name][r.implementation].push_back(&r);
    titles[name] = absl::StrCat(r.model, " on ", r.backend);
  }
  std::vector<std::string> written;
  for (const auto& [name, by_impl] : groups) {
    std::vector<std::string> files;
    std::vector<std::string> impls;
    for (const auto& [impl, impl_rows] : by_impl) {
      const std::string data = absl::StrCat(dir, "/", name, "_", impl, ".dat");
      std::ofstream out(data);
      out << "# processes speedup efficiency% communication_efficiency%\n";
      for (const ResultRow* r : impl_rows) {
        out << r->world_size << " "
            << (r->speedup ? absl::StrFormat("%.4f", *r->speedup) : "-") << " "
            << (r->efficiency ? absl::StrFormat("%.2f", 100 * *r->efficiency)
                              : "-")
            << " "
            << (r->communication_efficiency
                    ? absl::StrFormat("%.2f",
                                      100 * *r->communication_efficiency)
                    : "-")
            << "\n";
      }
      if (!out) {
        return absl::InternalError(absl::StrCat("cannot write ", data));
      }
      files.push_back(data);
      impls.push_back(impl);
    }
    const std::string png = absl::StrCat(dir, "/", name, ".png");
    const std::string script_path = absl::StrCat(dir, "/", name, ".gp");
    {
      std::ofstream script(script_path);
      script << GnuplotScript(titles[name], png, files, impls);
    }
    const std::string command =
        absl::StrCat(gnuplot, " '", script_path, "' 2>&1");
    FILE* pipe = ::popen(command.c_str(), "r");
    if (pipe == nullptr) {
      return absl::InternalError(absl::StrCat("cannot run ", gnuplot));
    }
    std::string output;
    char buffer[512];
    while (std::fgets(buffer, sizeof(buffer), pipe) != nullptr)
      output += buffer;
    const int status = ::pclose(pipe);
    if (status != 0) {
      return absl::InternalError(
          absl::StrCat("gnuplot failed on ", script_path, ": ", output));
    }
    written.push_back(png);
  }
  return written;
}

}  // namespace dtrain::experiments
