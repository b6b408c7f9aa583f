#include "trainer/report/live_report.h"

#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"

namespace dtrain::trainer {

absl::StatusOr<std::unique_ptr<LiveReport>> LiveReport::Create(
    const ReportOptions& o, const Identity& id) {
  std::unique_ptr<LiveReport> report(new LiveReport(o, id));
  const bool serves =
      o.metrics_port >= 0 && (id.rank == 0 || o.metrics_ranks == "all");
  if (serves) {
    std::map<std::string, std::string> labels = {
        {"rank", absl::StrCat(id.rank)},
        {"world_size", absl::StrCat(id.world_size)},
        {"model", id.model},
        {"backend", id.backend}};
    if (!o.metrics_run_id.empty()) labels["run_id"] = o.metrics_run_id;
    report->metrics_ = std::make_unique<LiveMetrics>(labels);
    // Port 0 stays 0 on every rank: each gets a free port of its own.
    const int port = o.metrics_port > 0 && o.metrics_ranks == "all"
                         ? o.metrics_port + id.local_rank
                         : o.metrics_port;
    absl::StatusOr<std::unique_ptr<MetricsServer>> server =
        MetricsServer::Start(o.metrics_bind, port,
                             report->metrics_->collectable());
    if (!server.ok()) {
      return absl::Status(
          server.status().code(),
          absl::StrCat("--metrics_port=", o.metrics_port,
                       port != o.metrics_port
                           ? absl::StrCat(" (+ local rank ", id.local_rank, ")")
                           : "",
                       ": ", server.status().message()));
    }
    report->server_ = *std::move(server);
  }
  if (const std::string path = StepLogPath(o.log_jsonl, id.rank);
      !path.empty()) {
    DTRAIN_ASSIGN_OR_RETURN(report->log_, StepLog::Open(path));
  }
  return report;
}

std::string LiveReport::metrics_url() const {
  return server_ != nullptr ? server_->url() : "";
}

void LiveReport::StartEpoch(int64_t epoch, double learning_rate,
                            absl::Time start) {
  epoch_ = epoch;
  learning_rate_ = learning_rate;
  epoch_start_ = start;
  epoch_samples_ = 0;
  if (metrics_ != nullptr) metrics_->SetEpoch(epoch, learning_rate);
}

absl::Status LiveReport::Step(int64_t batch, StepSample step, absl::Time now) {
  epoch_samples_ += step.samples;
  const double elapsed = absl::ToDoubleSeconds(now - epoch_start_);
  step.samples_per_second = elapsed > 0 ? epoch_samples_ / elapsed : 0;
  learning_rate_ = step.learning_rate;
  if (metrics_ != nullptr) {
    metrics_->SetEpoch(epoch_, step.learning_rate);
    metrics_->RecordStep(step);
  }
  if (log_ == nullptr || batch % print_freq_ != 0) return absl::OkStatus();
  StepLogLine line;
  line.event = "step";
  line.time = absl::ToDoubleSeconds(now - absl::UnixEpoch());
  line.rank = rank_;
  line.epoch = epoch_;
  line.step = step.global_step;
  line.batch = batch;
  line.loss = step.loss;
  line.lr = learning_rate_;
  line.samples_per_second = step.samples_per_second;
  line.step_seconds = step.step_seconds;
  line.exposed_communication_seconds = step.exposed_communication_seconds;
  return log_->Write(line);
}

absl::Status LiveReport::EndEpoch(const EpochMetrics& m, int64_t global_step) {
  if (log_ == nullptr) return absl::OkStatus();
  StepLogLine line;
  line.event = "epoch";
  line.time = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  line.rank = rank_;
  line.epoch = m.epoch;
  line.step = global_step;
  line.batch = m.steps;
  line.loss = m.train_loss;
  line.lr = m.lr;
  line.samples_per_second = m.samples_per_second;
  line.step_seconds = m.step_seconds_mean;
  line.exposed_communication_seconds = m.exposed_communication_seconds;
  return log_->Write(line);
}

}  // namespace dtrain::trainer
