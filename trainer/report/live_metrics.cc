#include "trainer/report/live_metrics.h"

#include <cmath>
#include <map>
#include <memory>
#include <string>

#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "trainer/report/run_metrics.h"

namespace dtrain::trainer {
namespace {

using Labels = std::map<std::string, std::string>;

prometheus::Counter& NewCounter(prometheus::Registry& registry,
                                const Labels& labels, const char* name,
                                const char* help) {
  return prometheus::BuildCounter()
      .Name(name)
      .Help(help)
      .Labels(labels)
      .Register(registry)
      .Add({});
}

prometheus::Gauge& NewGauge(prometheus::Registry& registry,
                            const Labels& labels, const char* name,
                            const char* help) {
  return prometheus::BuildGauge()
      .Name(name)
      .Help(help)
      .Labels(labels)
      .Register(registry)
      .Add({});
}

// A counter ignores negative increments; NaN would poison it for good.
double NonNegative(double x) { return std::isfinite(x) && x > 0 ? x : 0; }

}  // namespace

LiveMetrics::LiveMetrics(const Labels& labels)
    : registry_(std::make_shared<prometheus::Registry>()),
      step_duration_(prometheus::BuildHistogram()
                         .Name("dtrain_train_step_duration_seconds")
                         .Help("Training step time of this rank, from "
                               "receiving the batch to the end of the "
                               "optimizer step (data wait excluded).")
                         .Labels(labels)
                         .Register(*registry_)
                         .Add({}, StepHistogramBounds())),
      steps_(NewCounter(*registry_, labels, "dtrain_train_steps_total",
                        "Optimizer steps this process ran.")),
      samples_(NewCounter(*registry_, labels, "dtrain_train_samples_total",
                          "Training examples this rank processed.")),
      data_wait_(NewCounter(*registry_, labels,
                            "dtrain_train_data_wait_seconds_total",
                            "Time this rank waited for batches.")),
      exposed_communication_(NewCounter(
          *registry_, labels,
          "dtrain_train_exposed_communication_seconds_total",
          "Time this rank waited for gradient allreduces that backward did "
          "not hide (0 without gradient sync).")),
      samples_per_second_(
          NewGauge(*registry_, labels, "dtrain_train_samples_per_second",
                   "Training examples per second of this rank since its epoch "
                   "started.")),
      loss_(NewGauge(*registry_, labels, "dtrain_train_loss",
                     "Mean training loss of this rank's last batch.")),
      learning_rate_(NewGauge(*registry_, labels, "dtrain_train_learning_rate",
                              "Learning rate of the current epoch.")),
      epoch_(NewGauge(*registry_, labels, "dtrain_train_epoch",
                      "Current epoch, 0-based.")),
      global_step_(NewGauge(*registry_, labels, "dtrain_train_global_step",
                            "Optimizer steps of the whole run (carried over "
                            "on resume).")) {}

LiveMetrics::~LiveMetrics() = default;

void LiveMetrics::SetEpoch(int64_t epoch, double learning_rate) {
  epoch_.Set(static_cast<double>(epoch));
  learning_rate_.Set(learning_rate);
}

void LiveMetrics::RecordStep(const StepSample& s) {
  step_duration_.Observe(s.step_seconds);
  steps_.Increment();
  samples_.Increment(static_cast<double>(s.samples > 0 ? s.samples : 0));
  data_wait_.Increment(NonNegative(s.data_wait_seconds));
  exposed_communication_.Increment(
      NonNegative(s.exposed_communication_seconds));
  samples_per_second_.Set(s.samples_per_second);
  loss_.Set(s.loss);
  global_step_.Set(static_cast<double>(s.global_step));
}

std::shared_ptr<prometheus::Collectable> LiveMetrics::collectable() const {
  return registry_;
}

}  // namespace dtrain::trainer
