// What one rank reports while it trains, beyond rank 0's progress lines:
// live Prometheus metrics served on a port (--metrics_port, --metrics_ranks,
// --metrics_bind, --metrics_run_id) and JSON lines in a file (--log_jsonl).
// The training loop calls StartEpoch, Step after every optimizer step and
// EndEpoch; this class decides what this rank does with them (rank 0 only,
// or every rank; every print_freq-th batch and epoch ends for the file).
//
//   rank 0 (or every rank with metrics_ranks "all") serves
//     http://BIND:PORT+LOCAL_RANK/metrics   (port 0: a free port each)
//   labels of every series: rank, world_size, model, backend[, run_id]
//
// Serving stops when the LiveReport is destroyed (the end of Train), so the
// metrics are current for as long as the run lasts.
//
// Thread-compatible: the training thread calls it; scrapes read the metrics
// concurrently (trainer/report/live_metrics.h).
#ifndef DTRAIN_TRAINER_REPORT_LIVE_REPORT_H_
#define DTRAIN_TRAINER_REPORT_LIVE_REPORT_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/metrics_server.h"
#include "trainer/report/live_metrics.h"
#include "trainer/report/report_options.h"
#include "trainer/report/run_metrics.h"
#include "trainer/report/step_log.h"

namespace dtrain::trainer {

class LiveReport {
 public:
  // Who this rank is, for labels, ports and file names.
  struct Identity {
    int rank = 0;
    int world_size = 1;
    int local_rank = 0;
    std::string model;
    std::string backend;  // RunMetrics::backend ("gloo+shm", "nccl", ...)
  };

  // Starts serving and opens the file as `options` ask for this rank (an
  // object that does nothing when they ask for nothing). Errors name the
  // flag: "--metrics_port=9464: cannot serve metrics on 0.0.0.0:9464: Address
  // already in use ...", "--log_jsonl: cannot open PATH: ...".
  static absl::StatusOr<std::unique_ptr<LiveReport>> Create(
      const ReportOptions& options, const Identity& identity);

  // The URL this rank serves on, "" when it serves none.
  std::string metrics_url() const;

  // `start`: when the epoch started (samples per second count from there).
  void StartEpoch(int64_t epoch, double learning_rate, absl::Time start);
  // After each optimizer step; `batch` 0-based in the epoch, `now` the end of
  // the step. Fills step.samples_per_second. Errors: the file's.
  absl::Status Step(int64_t batch, StepSample step, absl::Time now);
  // After each epoch's training pass, with its metrics; writes the "epoch"
  // line. Errors: the file's.
  absl::Status EndEpoch(const EpochMetrics& epoch, int64_t global_step);

 private:
  LiveReport(const ReportOptions& options, const Identity& identity)
      : rank_(identity.rank), print_freq_(options.print_freq) {}

  const int rank_;
  const int print_freq_;
  std::unique_ptr<LiveMetrics> metrics_;
  std::unique_ptr<MetricsServer> server_;
  std::unique_ptr<StepLog> log_;
  int64_t epoch_ = 0;
  double learning_rate_ = 0;
  absl::Time epoch_start_;
  int64_t epoch_samples_ = 0;
};

}  // namespace dtrain::trainer

#endif  // DTRAIN_TRAINER_REPORT_LIVE_REPORT_H_
