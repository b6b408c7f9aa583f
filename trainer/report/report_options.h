// The reporting section of train's options: rank 0's progress, the metrics
// JSON file, live Prometheus metrics and JSON lines. Consumed by this
// package's Recorder, LiveReport and ProgressPrinter. A plain value type.
#ifndef DTRAIN_TRAINER_REPORT_REPORT_OPTIONS_H_
#define DTRAIN_TRAINER_REPORT_REPORT_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dtrain::trainer {

enum class ProgressStyle {
  kAuto,   // a bar on a terminal, plain lines otherwise
  kBar,    // an in-place bar (carriage returns)
  kLines,  // one line every print_freq batches, as the tutorials print
  kNone,
};

struct ReportOptions {
  // Rank 0 writes per-epoch metrics and the configuration here (JSON).
  std::string metrics_json;
  ProgressStyle progress = ProgressStyle::kAuto;
  // Batches between progress lines (and --log_jsonl lines).
  int print_freq = 10;
  // Live metrics while the run lasts (live_report.h, docs/MONITORING.md).
  // metrics_port: -1 off, 0 a free port, else rank 0 serves Prometheus's
  // /metrics on it, or with metrics_ranks "all" every rank on metrics_port +
  // its local rank. metrics_bind: the address served on ("0.0.0.0": every
  // interface, since Prometheus scrapes from another host). metrics_run_id:
  // a run_id label on every series ("" for none).
  int metrics_port = -1;
  std::string metrics_ranks = "0";  // "0" or "all"
  std::string metrics_bind = "0.0.0.0";
  std::string metrics_run_id;
  // One JSON line per logged step and epoch end; rank 0 only unless the path
  // holds "{rank}" (step_log.h). Empty: none.
  std::string log_jsonl;
  // One Chrome-trace JSON file of every rank's steps trace_first_step to
  // trace_last_step (1-based, both included), written by rank 0 at the end
  // or after a failure (trainer/trace/). Empty: none.
  std::string trace;
  int64_t trace_first_step = 1;
  int64_t trace_last_step = 50;
};

// kInvalidArgument naming the flag.
absl::Status ValidateReportOptions(const ReportOptions& o);

// "auto", "bar", "lines", "none"; kInvalidArgument naming --progress for
// anything else.
absl::StatusOr<ProgressStyle> ParseProgressStyle(const std::string& text);
const char* ProgressStyleName(ProgressStyle style);

// "A:B" (1 <= A <= B) into o's trace steps; kInvalidArgument naming
// --trace_steps otherwise.
absl::Status ParseTraceSteps(const std::string& text, ReportOptions* o);

}  // namespace dtrain::trainer

#endif  // DTRAIN_TRAINER_REPORT_REPORT_OPTIONS_H_
