// flight_analyze: reads the ranks' flight recorder dumps (what //trainer:train
// writes on a failure or at SIGUSR1, flight_rank<R>_<host>_<pid>.json) and
// names the first collective the ranks disagree on.
//
//   flight_analyze [--world_size=N] FILE_OR_FOLDER...
//
// A folder contributes every flight_*.json in it. Prints the findings (a
// mismatch, a rank that never issued a collective, a rank without a dump, a
// collective never finished), then each rank's last issued and finished
// collective per backend. Exits 0 when the ranks agree, 1 when it found
// something, 2 for bad arguments or an unreadable dump.
#include <dirent.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "base/atomic_file.h"
#include "base/user_path.h"
#include "tools/flight_analyze/flight_analysis.h"

ABSL_FLAG(int, world_size, 0,
          "The job's ranks, when the dumps do not say (a rank without a dump "
          "is then named); 0: the dumps' own.");

namespace dtrain::tools {
namespace {

constexpr base::FileLimit kDumpLimit = {"a flight recorder dump",
                                        int64_t{256} << 20};

// The files an argument names: itself, or a folder's flight_*.json.
std::vector<std::string> Files(const std::string& arg) {
  DIR* dir = ::opendir(arg.c_str());
  if (dir == nullptr) return {arg};
  std::vector<std::string> out;
  while (const dirent* e = ::readdir(dir)) {
    const std::string name = e->d_name;
    if (absl::StartsWith(name, "flight_") && absl::EndsWith(name, ".json"))
      out.push_back(arg + "/" + name);
  }
  ::closedir(dir);
  std::sort(out.begin(), out.end());
  return out;
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "flight_analyze [--world_size=N] FILE_OR_FOLDER...: the first "
      "collective the ranks' flight recorder dumps disagree on");
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() < 2) {
    std::cerr << "flight_analyze: name the dumps (files, or folders of "
                 "flight_*.json)\n";
    return 2;
  }
  if (absl::GetFlag(FLAGS_world_size) < 0) {
    std::cerr << "flight_analyze: --world_size must be 0 or more\n";
    return 2;
  }
  // Relative paths from where `bazel run` started.
  const std::string cwd =
      base::UserWorkingDirectory(std::getenv("BUILD_WORKING_DIRECTORY"));
  std::vector<FlightDump> dumps;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::vector<std::string> files =
        Files(base::ResolveUserPath(args[i], cwd));
    if (files.empty()) {
      std::cerr << "flight_analyze: no flight_*.json in " << args[i] << "\n";
      return 2;
    }
    for (const std::string& file : files) {
      absl::StatusOr<std::string> text = base::ReadFile(file, kDumpLimit);
      if (!text.ok()) {
        std::cerr << "flight_analyze: " << file << ": "
                  << text.status().message() << "\n";
        return 2;
      }
      absl::StatusOr<FlightDump> dump = ParseFlightDump(*text, file);
      if (!dump.ok()) {
        std::cerr << "flight_analyze: " << dump.status().message() << "\n";
        return 2;
      }
      std::cout << file << ": rank " << dump->rank << ", "
                << dump->entries.size() << " collectives, "
                << (dump->reason.empty() ? "no reason given" : dump->reason)
                << "\n";
      dumps.push_back(*std::move(dump));
    }
  }
  const std::vector<FlightFinding> findings =
      AnalyzeFlightDumps(dumps, absl::GetFlag(FLAGS_world_size));
  std::cout << "\n";
  if (findings.empty()) {
    std::cout << "the ranks agree: every collective was issued alike and "
                 "finished on every rank\n";
  }
  for (const FlightFinding& f : findings) std::cout << f.message << "\n";
  std::cout << "\n" << SummarizeFlightDumps(dumps);
  return findings.empty() ? 0 : 1;
}

}  // namespace
}  // namespace dtrain::tools

int main(int argc, char** argv) { return dtrain::tools::Main(argc, argv); }
