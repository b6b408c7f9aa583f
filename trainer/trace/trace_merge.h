// Every rank's StepTrace (step_trace.h) in one Chrome-trace file for Perfetto
// and chrome://tracing, written by rank 0 at the end of a run or after a
// failure, with the clocks aligned through the store (dist/store/
// store_clock.h) and each rank's offset and its error in the file's
// "otherData".
//
// MergeTrace is collective through the store, not the backend (which may be
// what failed): every rank of the world calls it once with the same prefix.
// Rank 0 first gathers every part it can within the timeout, then measures
// the clocks of the ranks that sent one, one after another. A rank that does
// not come within the timeout (dead, or stuck elsewhere) is named in the file
// as missing, one whose clock could not be measured too (its times are then
// its own clock's, and its offset is written "unknown"); rank 0's death
// leaves no file.
#ifndef DTRAIN_TRAINER_TRACE_TRACE_MERGE_H_
#define DTRAIN_TRAINER_TRACE_TRACE_MERGE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "base/chrome_trace.h"
#include "dist/store/store.h"
#include "dist/store/store_clock.h"
#include "trainer/trace/step_trace.h"

namespace dtrain::trainer {

// Round trips each rank makes to measure its clock against rank 0's, and how
// long either side waits for the other's next step once measuring began.
inline constexpr int kTraceClockRounds = 8;
inline constexpr absl::Duration kTraceClockStepTimeout = absl::Seconds(2);

// One rank's part of the merged trace.
struct RankTrace {
  int rank = 0;
  std::vector<TraceRecord> records;
  // Added to the rank's times to put them on rank 0's clock (rank 0's: 0),
  // when measured.
  store::ClockOffset clock;
  bool clock_known = false;
  // Why the rank has no part (""), or its clock could not be measured.
  std::string missing;
};

// The Chrome trace of `ranks`: a process per rank ("rank R"), a track per
// StepTrace track, times in microseconds from the earliest record, on rank
// 0's clock. Notes: "ranks", "steps" ("A:B"), "origin_unix_us",
// "clock_alignment", "clock_offset_us/rank<R>" and "clock_error_us/rank<R>"
// for each rank with a part ("unknown" where not measured), and "missing"
// when some have none or an unknown clock.
base::ChromeTrace BuildChromeTrace(const std::vector<RankTrace>& ranks,
                                   int64_t first_step, int64_t last_step);

struct TraceMergeSetup {
  int rank = 0;
  int world_size = 1;
  // The job's store; it must outlive the call.
  store::Store* store = nullptr;
  // Keys are "<prefix>/...": one prefix per merge in a job.
  std::string prefix = "trace";
  // Where rank 0 writes the file.
  std::string path;
  // Rank 0: how long it waits for all the other ranks' parts in all; the
  // others wait twice as long for rank 0 to begin measuring their clock
  // (rank 0 may have come later and be waiting for a missing rank's part).
  absl::Duration timeout = absl::Seconds(30);
};

// Rank 0 gathers the parts, answers the clock questions and writes the file
// (atomically); the other ranks send their trace and measure their clock.
// Errors: rank 0's file's; on the other ranks the store's, prefixed with
// what was being done.
absl::Status MergeTrace(const StepTrace& trace, const TraceMergeSetup& setup);

// Before training, on rank 0: kInvalidArgument naming --trace when `path`'s
// folder does not exist or cannot be written, so that the run does not end
// without its trace.
absl::Status CheckTracePath(const std::string& path);

}  // namespace dtrain::trainer

#endif  // DTRAIN_TRAINER_TRACE_TRACE_MERGE_H_
