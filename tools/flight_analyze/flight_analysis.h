// Reads the ranks' flight recorder dumps (dist/backend/flight_recorder.h) and
// names the first collective they disagree on, per backend: ranks that issued
// different operations or sizes under the same number (a desynchronised
// program), a rank that never issued a collective the others did (it is
// stuck before it, stopped, or took another path), a rank that left no dump
// at all, or, when every rank issued the same, one that never finished it.
// A rank whose dump was written before the others issued a collective (dumps
// at SIGUSR1 are not simultaneous) is not taken to have missed it.
//
// Pure functions; thread-compatible.
#ifndef DTRAIN_TOOLS_FLIGHT_ANALYZE_FLIGHT_ANALYSIS_H_
#define DTRAIN_TOOLS_FLIGHT_ANALYZE_FLIGHT_ANALYSIS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "dist/backend/flight_recorder.h"

namespace dtrain::tools {

struct FlightDump {
  std::string source;  // The file, for messages.
  int rank = -1;
  int world_size = 0;
  std::string reason;
  absl::Time dumped_at = absl::InfinitePast();
  std::vector<backend::FlightEntry> entries;
};

// Parses one dump. kInvalidArgument naming `source` and what is wrong (not
// JSON, another format, a field missing or of the wrong type).
absl::StatusOr<FlightDump> ParseFlightDump(absl::string_view json,
                                           absl::string_view source);

struct FlightFinding {
  enum class Kind {
    kMismatch,    // Ranks issued different collectives under one number.
    kMissing,     // A rank never issued a collective the others issued.
    kNoDump,      // A rank of the job left no dump.
    kUnfinished,  // Every rank issued it; some never finished it.
  };
  Kind kind;
  std::string backend;  // "gloo+shm/0": the backend's name and instance.
  int64_t seq = 0;
  std::vector<int> ranks;  // The ranks the finding names.
  std::string message;
};

// The findings, the most telling first: mismatches and missing ranks (each
// backend's first), then ranks without a dump, then unfinished collectives.
// `world_size` 0 takes the dumps' own (the largest), else the ranks seen.
std::vector<FlightFinding> AnalyzeFlightDumps(
    const std::vector<FlightDump>& dumps, int world_size = 0);

// Per rank and backend, the last collective issued and the last finished:
// the table flight_analyze prints after the findings.
std::string SummarizeFlightDumps(const std::vector<FlightDump>& dumps);

}  // namespace dtrain::tools

#endif  // DTRAIN_TOOLS_FLIGHT_ANALYZE_FLIGHT_ANALYSIS_H_
