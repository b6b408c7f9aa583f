#include "trainer/report/recorder.h"

#include <algorithm>
#include <iostream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"

namespace dtrain::trainer {

Recorder::Recorder(const ReportOptions& options, const Setup& setup,
                   const backend::SmallCollectives& sync)
    : options_(options),
      setup_(setup),
      sync_(sync),
      rank0_(sync.rank() == 0),
      progress_(options.progress, setup.log_is_terminal, options.print_freq,
                setup.log != nullptr ? *setup.log : std::cerr) {
  if (!options.trace.empty()) {
    trace_ = std::make_unique<StepTrace>(options.trace_first_step,
                                         options.trace_last_step);
    marks_ = base::SubscribeTraceMarks(
        [trace = trace_.get(), rank = sync.rank()](const base::TraceMark& m) {
          if (m.rank == rank) trace->Instant(m.name, m.text, m.at);
        });
  }
}

absl::StatusOr<std::unique_ptr<Recorder>> Recorder::Create(
    const ReportOptions& options, const Setup& setup,
    const backend::SmallCollectives& sync) {
  if (!options.trace.empty() && sync.rank() == 0) {
    DTRAIN_RETURN_IF_ERROR(CheckTracePath(options.trace));
  }
  std::unique_ptr<Recorder> recorder(new Recorder(options, setup, sync));
  DTRAIN_ASSIGN_OR_RETURN(recorder->live_,
                          LiveReport::Create(options, setup.identity));
  if (const std::string url = recorder->live_->metrics_url(); !url.empty()) {
    const std::string line =
        absl::StrCat("[rank ", sync.rank(), "] live metrics on ", url);
    if (recorder->rank0_) {
      recorder->metrics_.metrics_url = url;
      recorder->Say(line);
    } else if (setup.log != nullptr) {
      *setup.log << line << std::endl;
    }
  }
  return recorder;
}

void Recorder::Say(const std::string& line) {
  if (rank0_) progress_.Message(line);
}

void Recorder::StartEpoch(int64_t epoch, int64_t steps, double learning_rate) {
  epoch_ = Epoch();
  epoch_.epoch = epoch;
  epoch_.steps = steps;
  progress_.StartEpoch(epoch, setup_.epochs, steps);
  epoch_.start = epoch_.last_step_end = absl::Now();
  live_->StartEpoch(epoch, learning_rate, epoch_.start);
}

void Recorder::DataWait(absl::Time start, absl::Time end) {
  const double seconds = absl::ToDoubleSeconds(end - start);
  epoch_.step_waited += seconds;
  epoch_.data_time.Update(seconds);
  if (trace_ != nullptr) trace_->DataWait(start, end);
}

void Recorder::Checkpointed(int64_t step, absl::Time start, absl::Time end) {
  if (trace_ != nullptr) trace_->Checkpoint(step, start, end);
}

void Recorder::Failed(absl::string_view message) {
  if (trace_ != nullptr) trace_->Instant("failure", message, absl::Now());
}

absl::Status Recorder::WriteTrace(TraceMergeSetup setup) {
  if (trace_ == nullptr || trace_written_) return absl::OkStatus();
  trace_written_ = true;
  setup.path = options_.trace;
  DTRAIN_RETURN_IF_ERROR(MergeTrace(*trace_, setup));
  if (rank0_) {
    // The steps it holds: a run may end before --trace_steps does.
    int64_t last = options_.trace_first_step;
    for (const TraceRecord& r : trace_->Records())
      last = std::max(last, r.step);
    last = std::min(last, options_.trace_last_step);
    Say(absl::StrCat("trace of steps ", options_.trace_first_step, " to ", last,
                     " of ", setup.world_size,
                     setup.world_size == 1 ? " rank" : " ranks", " in ",
                     options_.trace, " (ui.perfetto.dev, chrome://tracing)"));
  }
  return absl::OkStatus();
}

absl::Status Recorder::Step(const StepRecord& step) {
  Epoch& e = epoch_;
  if (!first_step_done_) {
    first_step_done_ = true;
    metrics_.startup_seconds =
        absl::ToDoubleSeconds(absl::Now() - setup_.start);
  }
  const double exposed =
      step.ddp != nullptr
          ? absl::ToDoubleSeconds(step.ddp->exposed_communication)
          : 0.0;
  e.exposed += exposed;
  if (step.ddp != nullptr) e.timeline.Add(*step.ddp);
  if (trace_ != nullptr && step.phases != nullptr) {
    trace_->Step(step.global_step, *step.phases, step.ddp);
  }
  if (step.grad_norm.has_value()) e.grad_norm_sum += *step.grad_norm;
  if (step.skipped) ++e.skipped;

  const int64_t n = step.examples;
  const double loss = step.loss_sum / std::max<int64_t>(1, n);
  e.loss_sum += step.loss_sum;
  e.correct1 += step.correct1;
  e.correct5 += step.correct5;
  e.examples += n;
  e.loss.Update(loss, n);
  e.top1.Update(100.0 * step.correct1 / std::max<int64_t>(1, n), n);
  e.top5.Update(100.0 * step.correct5 / std::max<int64_t>(1, n), n);
  const absl::Time now = absl::Now();
  e.batch_time.Update(absl::ToDoubleSeconds(now - e.last_step_end));
  // The step's own time: without its waits for the loader.
  e.step_seconds.push_back(absl::ToDoubleSeconds(now - e.last_step_end) -
                           e.step_waited);
  e.last_step_end = now;
  const int64_t batch = static_cast<int64_t>(e.step_seconds.size()) - 1;
  DTRAIN_RETURN_IF_ERROR(live_->Step(
      batch,
      {e.step_seconds.back(), e.step_waited, exposed, n, loss,
       /*samples_per_second=*/0, step.global_step, step.learning_rate},
      now));
  e.step_waited = 0;
  if (rank0_) {
    BatchReport report;
    report.batch = batch;
    report.batch_time = &e.batch_time;
    report.data_time = &e.data_time;
    report.loss = &e.loss;
    report.top1 = &e.top1;
    report.top5 = &e.top5;
    report.samples_per_second = static_cast<double>(e.examples) *
                                sync_.world_size() /
                                absl::ToDoubleSeconds(now - e.start);
    progress_.Batch(report);
  }
  return absl::OkStatus();
}

absl::StatusOr<EpochMetrics> Recorder::EndEpoch(
    double lr, absl::optional<double> loss_scale, int64_t global_step) {
  const Epoch& e = epoch_;
  progress_.EndEpoch();
  const double seconds = absl::ToDoubleSeconds(e.last_step_end - e.start);
  // Exact totals over ranks, and the slowest rank's times.
  DTRAIN_ASSIGN_OR_RETURN(
      const Scores scores,
      ScoresOverRanks(sync_, e.loss_sum, e.correct1, e.correct5, e.examples));
  DTRAIN_ASSIGN_OR_RETURN(
      const std::vector<double> maxima,
      sync_.AllReduce({seconds, e.data_time.sum(), e.exposed},
                      backend::ReduceOp::kMax));
  EpochMetrics m;
  m.epoch = e.epoch;
  m.steps = static_cast<int64_t>(e.step_seconds.size());
  m.samples = static_cast<int64_t>(scores.examples);
  m.lr = lr;
  m.skipped_steps = e.skipped;
  if (setup_.clips_gradients && !e.step_seconds.empty())
    m.grad_norm_mean = e.grad_norm_sum / e.step_seconds.size();
  m.loss_scale = loss_scale;
  m.epoch_seconds = maxima[0];
  m.samples_per_second =
      m.epoch_seconds > 0 ? scores.examples / m.epoch_seconds : 0;
  m.train_loss = scores.loss;
  m.train_top1 = scores.top1;
  m.train_top5 = scores.top5;
  m.data_seconds = maxima[1];
  m.exposed_communication_seconds = maxima[2];
  m.ddp_timeline = e.timeline.Mean();
  for (double x : e.step_seconds) m.step_seconds_sum += x;
  m.step_seconds_mean =
      e.step_seconds.empty() ? 0 : m.step_seconds_sum / e.step_seconds.size();
  m.step_seconds_p50 = Percentile(e.step_seconds, 50);
  m.step_seconds_p90 = Percentile(e.step_seconds, 90);
  m.step_seconds_max = Percentile(e.step_seconds, 100);
  m.step_histogram_counts = StepHistogram(e.step_seconds);
  DTRAIN_RETURN_IF_ERROR(live_->EndEpoch(m, global_step));
  Say(absl::StrFormat(
      "epoch %d: loss %.4f  top1 %.2f%%  top5 %.2f%%  %.1f s  %.0f "
      "samples/s  (data %.2f s, exposed communication %.2f s)",
      m.epoch + 1, m.train_loss, m.train_top1, m.train_top5, m.epoch_seconds,
      m.samples_per_second, m.data_seconds, m.exposed_communication_seconds));
  return m;
}

absl::Status Recorder::WriteMetrics(double best_top1, int64_t global_step) {
  metrics_.best_top1 = best_top1;
  metrics_.global_step = global_step;
  metrics_.wall_seconds = absl::ToDoubleSeconds(absl::Now() - setup_.start);
  if (!rank0_ || options_.metrics_json.empty()) return absl::OkStatus();
  return WriteMetricsJson(options_.metrics_json, metrics_);
}

}  // namespace dtrain::trainer
