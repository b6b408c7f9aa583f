#include "experiments/prometheus_export.h"

#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "prometheus/counter.h"
#include "prometheus/gateway.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"
#include "trainer/report/run_metrics.h"

namespace dtrain::experiments {
namespace {

prometheus::Labels LabelsOf(const ResultRow& r, const std::string& run_id) {
  prometheus::Labels labels = {{"implementation", r.implementation},
                               {"backend", r.backend},
                               {"model", r.model},
                               {"comm_hook", r.comm_hook},
                               {"zero", absl::StrCat(r.zero)},
                               {"world_size", absl::StrCat(r.world_size)},
                               {"batch_size", absl::StrCat(r.batch_size)},
                               {"run_id", run_id}};
  // Only where it is not the default, so that the dashboards' series (the
  // default's) keep their labels.
  if (r.instrumentation != kDefaultInstrumentation)
    labels["instrumentation"] = r.instrumentation;
  return labels;
}

}  // namespace

// The registry of the latest Update, swapped in whole.
class ScalingMetrics::Current : public prometheus::Collectable {
 public:
  std::vector<prometheus::MetricFamily> Collect() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return registry_->Collect();
  }
  void Set(std::shared_ptr<prometheus::Registry> registry) {
    std::lock_guard<std::mutex> lock(mu_);
    registry_ = std::move(registry);
  }

 private:
  mutable std::mutex mu_;
  std::shared_ptr<prometheus::Registry> registry_ =
      std::make_shared<prometheus::Registry>();
};

ScalingMetrics::ScalingMetrics(std::string run_id)
    : run_id_(std::move(run_id)), current_(std::make_shared<Current>()) {}

std::shared_ptr<prometheus::Collectable> ScalingMetrics::collectable() const {
  return current_;
}

void ScalingMetrics::Update(const std::vector<ResultRow>& rows) {
  // A fresh registry each time: removing series from prometheus-cpp families
  // one by one is not worth it for a few dozen series.
  auto registry = std::make_shared<prometheus::Registry>();
  auto gauge = [&](const char* name, const char* help) -> auto& {
    return prometheus::BuildGauge().Name(name).Help(help).Register(*registry);
  };
  auto& epoch = gauge("ddp_epoch_duration_seconds",
                      "Median training epoch time (slowest rank).");
  auto& bound = gauge("ddp_no_communication_epoch_duration_seconds",
                      "Median epoch time of the same processes without "
                      "gradient averaging (the no-communication bound).");
  auto& wall = gauge("ddp_wall_duration_seconds",
                     "Median wall time of a whole run, start-up included.");
  auto& startup = gauge("ddp_startup_duration_seconds",
                        "Median time from process start to the first step.");
  auto& sps = gauge("ddp_samples_per_second",
                    "Median training throughput over all processes.");
  auto& speedup =
      gauge("ddp_speedup_ratio", "Throughput relative to one process.");
  auto& efficiency =
      gauge("ddp_efficiency_ratio", "Speedup divided by the process count.");
  auto& comm_eff = gauge("ddp_communication_efficiency_ratio",
                         "Throughput with gradient averaging relative to the "
                         "no-communication bound.");
  auto& exposed = gauge("ddp_exposed_communication_seconds",
                        "Median time per run spent waiting for gradient "
                        "allreduces that backward did not hide.");
  auto& exposed_ratio = gauge("ddp_exposed_communication_ratio",
                              "Exposed communication as a share of the epoch.");
  auto& step_comm = gauge("ddp_step_communication_seconds",
                          "What gradient averaging adds to a step: the "
                          "median step time minus the no-communication "
                          "bound's.");
  auto& data = gauge("ddp_data_wait_seconds",
                     "Median time per run spent waiting for batches.");
  auto& steps = prometheus::BuildHistogram()
                    .Name("ddp_step_duration_seconds")
                    .Help("Step times of rank 0, all repeats.")
                    .Register(*registry);
  auto& runs = prometheus::BuildCounter()
                   .Name("ddp_runs_total")
                   .Help("Trainings run by the sweep, by outcome.")
                   .Register(*registry);
  const std::vector<double>& bounds = trainer::StepHistogramBounds();
  for (const ResultRow& r : rows) {
    const prometheus::Labels labels = LabelsOf(r, run_id_);
    prometheus::Labels ok = labels;
    ok["status"] = "ok";
    prometheus::Labels failed = labels;
    failed["status"] = "failed";
    runs.Add(ok).Increment(r.runs);
    runs.Add(failed).Increment(r.failed);
    if (r.runs == 0) continue;
    epoch.Add(labels).Set(r.epoch_seconds);
    wall.Add(labels).Set(r.wall_seconds);
    startup.Add(labels).Set(r.startup_seconds);
    sps.Add(labels).Set(r.samples_per_second);
    exposed.Add(labels).Set(r.exposed_communication_seconds);
    exposed_ratio.Add(labels).Set(r.exposed_share);
    data.Add(labels).Set(r.data_seconds);
    if (r.bound_epoch_seconds) bound.Add(labels).Set(*r.bound_epoch_seconds);
    if (r.speedup) speedup.Add(labels).Set(*r.speedup);
    if (r.efficiency) efficiency.Add(labels).Set(*r.efficiency);
    if (r.communication_efficiency)
      comm_eff.Add(labels).Set(*r.communication_efficiency);
    if (r.communication_seconds_per_step)
      step_comm.Add(labels).Set(*r.communication_seconds_per_step);
    auto& h = steps.Add(labels, bounds);
    if (r.step_histogram.size() == bounds.size() + 1) {
      std::vector<double> increments(r.step_histogram.begin(),
                                     r.step_histogram.end());
      h.ObserveMultiple(increments, r.step_seconds_sum);
    }
  }
  current_->Set(std::move(registry));
}

std::string ExpositionText(const ScalingMetrics& metrics) {
  return prometheus::TextSerializer().Serialize(
      metrics.collectable()->Collect());
}

absl::Status PushToGateway(const ScalingMetrics& metrics,
                           const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--pushgateway: '", address, "' is not host:port"));
  }
  prometheus::Gateway gateway(address.substr(0, colon),
                              address.substr(colon + 1), "dtrain_scaling",
                              {{"run_id", metrics.run_id()}});
  gateway.RegisterCollectable(metrics.collectable());
  const int code = gateway.Push();
  if (code < 200 || code >= 300) {
    return absl::UnavailableError(absl::StrCat(
        "pushing to the Pushgateway at ", address, " failed: ",
        code < 0 ? "cannot connect" : absl::StrCat("HTTP ", code)));
  }
  return absl::OkStatus();
}

}  // namespace dtrain::experiments
