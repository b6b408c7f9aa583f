// Everything a training run reports, behind one object that the loop feeds:
// rank 0's progress lines or bar and messages, live metrics and JSON lines
// (LiveReport), the tutorial's meters, the per-epoch metrics with exact
// totals over ranks, and the metrics JSON file.
//
//   recorder->StartEpoch(epoch, steps, lr);
//   for each step:
//     for each micro-batch: recorder->DataWait(seconds waiting for it);
//     ... step ...
//     DTRAIN_RETURN_IF_ERROR(recorder->Step(record));
//   DTRAIN_ASSIGN_OR_RETURN(EpochMetrics m, recorder->EndEpoch(...));
//
// EndEpoch is collective (two small allreduces through `sync`); everything
// else is local. Thread-compatible: the training thread calls it; live
// metrics are scraped concurrently (live_metrics.h). Lifetimes: the log
// stream and `sync`'s backend outlive the recorder.
#ifndef DTRAIN_TRAINER_REPORT_RECORDER_H_
#define DTRAIN_TRAINER_REPORT_RECORDER_H_

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/optional.h"
#include "base/trace_marks.h"
#include "dist/backend/small_collectives.h"
#include "dist/ddp/ddp_types.h"
#include "trainer/report/ddp_timeline.h"
#include "trainer/report/live_report.h"
#include "trainer/report/meters.h"
#include "trainer/report/progress.h"
#include "trainer/report/report_options.h"
#include "trainer/report/run_metrics.h"
#include "trainer/report/scores.h"
#include "trainer/trace/step_phases.h"
#include "trainer/trace/step_trace.h"
#include "trainer/trace/trace_merge.h"

namespace dtrain::trainer {

// What one optimizer step did, on this rank.
struct StepRecord {
  int64_t examples = 0;
  double loss_sum = 0;
  int64_t correct1 = 0;
  int64_t correct5 = 0;
  // Before clipping, when clipping is on.
  absl::optional<double> grad_norm;
  // Skipped by the loss scaler (non-finite gradients).
  bool skipped = false;
  // DDP's timeline of the step; null without gradient sync.
  const ddp::StepStats* ddp = nullptr;
  // Steps taken, this one included, and the step's learning rate.
  int64_t global_step = 0;
  double learning_rate = 0;
  // When its parts ran (for --trace); null: not measured.
  const StepPhases* phases = nullptr;
};

class Recorder {
 public:
  struct Setup {
    // Rank 0's progress and messages; other ranks write only the line naming
    // where they serve live metrics.
    std::ostream* log = nullptr;
    bool log_is_terminal = false;
    // When the process started (startup_seconds, wall_seconds).
    absl::Time start = absl::Now();
    LiveReport::Identity identity;
    // The run's epochs (for the progress), and whether it clips gradients
    // (grad_norm_mean in the metrics).
    int64_t epochs = 1;
    bool clips_gradients = false;
  };

  // Starts the live report (LiveReport::Create's errors: a busy port fails
  // here, before any collective) and says where metrics are served.
  static absl::StatusOr<std::unique_ptr<Recorder>> Create(
      const ReportOptions& options, const Setup& setup,
      const backend::SmallCollectives& sync);

  // A line of rank 0's (nothing on other ranks).
  void Say(const std::string& line);

  // The run's metrics so far: the caller fills in what only it knows (the
  // configuration, the model's size, where it resumed from).
  RunMetrics& metrics() { return metrics_; }

  // `steps`: the optimizer steps this epoch runs; `learning_rate` at its
  // first step.
  void StartEpoch(int64_t epoch, int64_t steps, double learning_rate);
  // A wait for one batch (each micro-batch of a step), from `start` to
  // `end`.
  void DataWait(absl::Time start, absl::Time end);
  // After each optimizer step. Errors: the JSON-lines file's.
  absl::Status Step(const StepRecord& step);
  // Collective. The epoch's metrics with exact totals over ranks and the
  // slowest rank's times, reported (live metrics, the epoch's line). `lr`:
  // the epoch's learning rate for the metrics; `loss_scale` the loss
  // scaler's when there is one; `global_step` the steps taken so far.
  // Errors: the backend's, the JSON-lines file's.
  absl::StatusOr<EpochMetrics> EndEpoch(double lr,
                                        absl::optional<double> loss_scale,
                                        int64_t global_step);

  // Sets the run's totals and has rank 0 write the metrics JSON (when the
  // options name a file). Errors: the file's.
  absl::Status WriteMetrics(double best_top1, int64_t global_step);

  // The trace (options' `trace`; trainer/trace/): a checkpoint written after
  // step `step`, and the failure that ended the run. Nothing without one.
  void Checkpointed(int64_t step, absl::Time start, absl::Time end);
  void Failed(absl::string_view message);
  // With a trace: collective through `setup.store` (trace_merge.h; the
  // recorder fills in the path): rank 0 writes the file. Errors: the file's
  // and the store's. Without a trace, or after a first call (the keys are
  // the merge's once): OK.
  absl::Status WriteTrace(TraceMergeSetup setup);
  // Whether WriteTrace ran.
  bool trace_written() const { return trace_written_; }

 private:
  Recorder(const ReportOptions& options, const Setup& setup,
           const backend::SmallCollectives& sync);

  // The current epoch's accumulators.
  struct Epoch {
    int64_t epoch = 0;
    int64_t steps = 0;
    absl::Time start;
    absl::Time last_step_end;
    AverageMeter batch_time, data_time, loss, top1, top5;
    std::vector<double> step_seconds;
    double step_waited = 0;
    double exposed = 0;
    double grad_norm_sum = 0;
    DdpTimelineAccumulator timeline;
    int64_t correct1 = 0, correct5 = 0, examples = 0, skipped = 0;
    double loss_sum = 0;
  };

  const ReportOptions& options_;
  const Setup setup_;
  const backend::SmallCollectives sync_;
  const bool rank0_;
  ProgressPrinter progress_;
  std::unique_ptr<LiveReport> live_;
  RunMetrics metrics_;
  bool first_step_done_ = false;
  Epoch epoch_;
  std::unique_ptr<StepTrace> trace_;  // null without a trace
  bool trace_written_ = false;
  // This rank's stall warnings, onto the trace (base/trace_marks.h).
  base::TraceMarkSubscription marks_;
};

}  // namespace dtrain::trainer

#endif  // DTRAIN_TRAINER_REPORT_RECORDER_H_
