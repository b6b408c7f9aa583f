// The reporting section's flags (trainer/report/report_options.h).
#include <cstdlib>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "trainer/flags/train_flags.h"

ABSL_FLAG(std::string, flight_recorder_dir, "",
          "Where each rank writes its last collectives (the flight recorder, "
          "DTRAIN_FLIGHT_RECORDER=N of them) when training fails or on "
          "SIGUSR1, as flight_rank<R>_<host>_<pid>.json; "
          "tools/flight_analyze reads them. Default: $TMPDIR, else /tmp.");
ABSL_FLAG(int, flight_recorder, -1,
          "How many of its last collectives each rank's flight recorder "
          "keeps (0: off). Default: $DTRAIN_FLIGHT_RECORDER, else 2048.");
ABSL_FLAG(std::string, metrics_json, "",
          "Rank 0 writes per-epoch metrics and the configuration here.");
ABSL_FLAG(std::string, progress, "auto",
          "auto (a bar on a terminal), bar, lines or none.");
ABSL_FLAG(int, print_freq, 10, "Batches between progress lines.");
ABSL_FLAG(int, metrics_port, -1,
          "Serve live Prometheus metrics on http://BIND:PORT/metrics while "
          "training (rank 0; with --metrics_ranks=all every rank, on PORT + "
          "its local rank). 0: a free port, printed. -1: off.");
ABSL_FLAG(std::string, metrics_ranks, "0",
          "Which ranks serve --metrics_port: 0 (rank 0 only) or all.");
ABSL_FLAG(std::string, metrics_bind, "0.0.0.0",
          "Address --metrics_port binds (0.0.0.0: every interface, for a "
          "Prometheus on another host; 127.0.0.1: this host only).");
ABSL_FLAG(std::string, metrics_run_id, "",
          "A run_id label on every live metric (empty: none).");
ABSL_FLAG(std::string, log_jsonl, "",
          "Append one JSON line per logged step (every --print_freq batches) "
          "and per epoch here; rank 0 only, unless PATH holds {rank} (each "
          "rank its own file).");

ABSL_FLAG(std::string, trace, "",
          "Write one Chrome-trace JSON file of every rank's steps here "
          "(--trace_steps): data wait, forward, backward, each DDP bucket's "
          "allreduce, the optimizer, checkpoints; rank 0 merges the ranks' "
          "parts at the end, or after a failure, with their clocks aligned. "
          "Opens in ui.perfetto.dev and chrome://tracing.");
ABSL_FLAG(std::string, trace_steps, "1:50",
          "A:B: the optimizer steps --trace records (1-based, both "
          "included).");

namespace dtrain::trainer {

absl::Status ReadReportFlags(ReportOptions* o) {
  o->metrics_json = absl::GetFlag(FLAGS_metrics_json);
  DTRAIN_ASSIGN_OR_RETURN(o->progress,
                          ParseProgressStyle(absl::GetFlag(FLAGS_progress)));
  o->print_freq = absl::GetFlag(FLAGS_print_freq);
  o->metrics_port = absl::GetFlag(FLAGS_metrics_port);
  o->metrics_ranks = absl::GetFlag(FLAGS_metrics_ranks);
  o->metrics_bind = absl::GetFlag(FLAGS_metrics_bind);
  o->metrics_run_id = absl::GetFlag(FLAGS_metrics_run_id);
  o->log_jsonl = absl::GetFlag(FLAGS_log_jsonl);
  o->trace = absl::GetFlag(FLAGS_trace);
  DTRAIN_RETURN_IF_ERROR(ParseTraceSteps(absl::GetFlag(FLAGS_trace_steps), o));
  return absl::OkStatus();
}

absl::Status ApplyFlightRecorderFlag() {
  const int n = absl::GetFlag(FLAGS_flight_recorder);
  if (n == -1) return absl::OkStatus();
  if (n < 0 || n > (1 << 24)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--flight_recorder: ", n, " is not a number of collectives from 0 to ",
        1 << 24, " (-1: $DTRAIN_FLIGHT_RECORDER, else 2048)"));
  }
  // The recorder sizes itself from the environment at its first use, which
  // comes later; spawned ranks inherit it.
  if (::setenv("DTRAIN_FLIGHT_RECORDER", absl::StrCat(n).c_str(), 1) != 0) {
    return absl::InternalError("--flight_recorder: setenv failed");
  }
  return absl::OkStatus();
}

std::string FlightRecorderDir() {
  std::string dir = absl::GetFlag(FLAGS_flight_recorder_dir);
  if (!dir.empty()) return dir;
  const char* tmp = std::getenv("TMPDIR");
  return tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
}

}  // namespace dtrain::trainer
