// Chrome's Trace Event Format: the JSON that Perfetto (ui.perfetto.dev and
// trace_processor) and chrome://tracing open. A writer for the slices a
// training run records (a process per rank, tracks within it), and a checker
// of the format's rules plus the one a readable trace keeps: no two slices on
// one track overlap.
//
// Times are microseconds on one clock for the whole file: the writer aligns
// nothing, the caller gives every rank's times on the same clock.
//
// Thread safety: a ChromeTrace is built by one thread at a time;
// CheckChromeTrace is a pure function.
#ifndef DTRAIN_BASE_CHROME_TRACE_H_
#define DTRAIN_BASE_CHROME_TRACE_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace dtrain::base {

// A span of time on a track: the format's complete event (phase "X").
struct TraceSlice {
  std::string name;
  std::string category;
  int64_t start_us = 0;
  int64_t duration_us = 0;
  int pid = 0;  // The process (a rank).
  int tid = 0;  // The track within it.
  // Shown with the slice: numbers stay numbers in the file.
  std::vector<std::pair<std::string, double>> numbers;
  std::vector<std::pair<std::string, std::string>> texts;
};

// A moment on a track (phase "i", scope thread): a stall warning, a failure.
struct TraceInstant {
  std::string name;
  std::string category;
  int64_t at_us = 0;
  int pid = 0;
  int tid = 0;
  std::vector<std::pair<std::string, std::string>> texts;
};

class ChromeTrace {
 public:
  // The name shown for process `pid` ("rank 3"); processes sort by pid.
  void NameProcess(int pid, absl::string_view name);
  // The name shown for track `tid` of `pid` ("bucket 2"); tracks sort by tid.
  void NameTrack(int pid, int tid, absl::string_view name);
  void Add(TraceSlice slice);
  void Add(TraceInstant instant);
  // A note in the file's "otherData" (the clocks' alignment and its error,
  // the steps traced); a later note of the same key replaces the earlier.
  void SetNote(absl::string_view key, absl::string_view value);

  int64_t slices() const { return static_cast<int64_t>(slices_.size()); }

  // The JSON object form: {"traceEvents": [...], "displayTimeUnit": "ms",
  // "otherData": {...}}, metadata events first, then the events in the order
  // added.
  std::string ToJson() const;

 private:
  std::map<int, std::string> processes_;
  std::map<std::pair<int, int>, std::string> tracks_;
  std::vector<TraceSlice> slices_;
  std::vector<TraceInstant> instants_;
  std::map<std::string, std::string> notes_;
};

// What CheckChromeTrace asks of a trace besides the format's rules.
struct TraceExpectations {
  // Each of these processes is named and has at least one slice.
  std::vector<int> pids;
  // Notes "otherData" must hold.
  std::vector<std::string> notes;
};

// Checks `json` against the Trace Event Format's rules (the JSON object form,
// or the bare array form):
//   - every event is an object with a string "ph" and a string "name", and
//     integer "pid" and "tid" where its phase has them;
//   - "X" events have numbers "ts" >= 0 and "dur" >= 0; "i" events a "ts"
//     and a scope "s" of "g", "p" or "t"; "B" and "E" pair up per track;
//   - "M" events are process_name, thread_name, process_sort_index,
//     thread_sort_index or process_labels, with their "args";
//   - no two "X" events on one track (pid, tid) overlap: each starts at or
//     after the end of the one before it in time;
// and `expect`. OK, or kInvalidArgument naming the first event that breaks a
// rule (its index in traceEvents, its name) and the rule.
absl::Status CheckChromeTrace(absl::string_view json,
                              const TraceExpectations& expect = {});

}  // namespace dtrain::base

#endif  // DTRAIN_BASE_CHROME_TRACE_H_
