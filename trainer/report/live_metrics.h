// A training run's live Prometheus metrics, one set per rank, updated by the
// training loop after every step and read by a scrape at any time
// (base/metrics_server.h serves them). Names follow Prometheus's
// conventions (base units, _seconds, _total) with the prefix dtrain_train_,
// so that they never mix with the sweep's ddp_ results
// (experiments/prometheus_export.h); docs/MONITORING.md has the table:
//
//   dtrain_train_step_duration_seconds         histogram of step times (data
//                                              wait excluded), the buckets
//                                              of StepHistogramBounds()
//   dtrain_train_steps_total                   counter: steps of this process
//   dtrain_train_samples_total                 counter: examples of this rank
//   dtrain_train_data_wait_seconds_total       counter: waiting for batches
//   dtrain_train_exposed_communication_seconds_total
//                                              counter: gradient-allreduce
//                                              wait backward did not hide
//   dtrain_train_samples_per_second            gauge: this rank, epoch so far
//   dtrain_train_loss                          gauge: last step's batch loss
//   dtrain_train_learning_rate                 gauge
//   dtrain_train_epoch                         gauge: 0-based
//   dtrain_train_global_step                   gauge: steps of the whole run
//                                              (carried over on resume)
//
// Every series carries the labels given to the constructor (the trainer
// gives rank, world_size, model, backend and, when set, run_id).
//
// Thread safety: the Record and Set calls come from one thread (the training
// loop); collecting (a scrape, through collectable()) may run concurrently
// from any number of threads. The hot path allocates nothing: the metrics
// are created once, and each call only updates prometheus-cpp's counters
// (atomics, and the histogram's own mutex).
#ifndef DTRAIN_TRAINER_REPORT_LIVE_METRICS_H_
#define DTRAIN_TRAINER_REPORT_LIVE_METRICS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "prometheus/collectable.h"

namespace prometheus {
class Counter;
class Gauge;
class Histogram;
class Registry;
}  // namespace prometheus

namespace dtrain::trainer {

// What one finished training step measured on this rank.
struct StepSample {
  // From receiving the batch to the end of the optimizer step.
  double step_seconds = 0;
  // Waiting for this batch.
  double data_wait_seconds = 0;
  // Gradient-allreduce wait that backward did not hide
  // (ddp::StepStats::exposed_communication; 0 without gradient sync).
  double exposed_communication_seconds = 0;
  // Examples in this rank's batch, and the mean loss over them.
  int64_t samples = 0;
  double loss = 0;
  // This rank's examples per second since its epoch started.
  double samples_per_second = 0;
  // Optimizer steps of the whole run after this one.
  int64_t global_step = 0;
  // The learning rate this step used (schedules set it per step).
  double learning_rate = 0;
};

class LiveMetrics {
 public:
  // `labels`: constant labels of every series. Their names are the caller's
  // fixed choice and must be valid Prometheus label names (prometheus-cpp
  // throws otherwise: a programming error); values may be anything.
  explicit LiveMetrics(const std::map<std::string, std::string>& labels);
  ~LiveMetrics();
  LiveMetrics(const LiveMetrics&) = delete;
  LiveMetrics& operator=(const LiveMetrics&) = delete;

  // At the start of each epoch.
  void SetEpoch(int64_t epoch, double learning_rate);
  void RecordStep(const StepSample& step);

  // Register this with an Exposer (or collect it directly); it stays valid
  // as long as anyone holds it, even after the LiveMetrics is gone.
  std::shared_ptr<prometheus::Collectable> collectable() const;

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Histogram& step_duration_;
  prometheus::Counter& steps_;
  prometheus::Counter& samples_;
  prometheus::Counter& data_wait_;
  prometheus::Counter& exposed_communication_;
  prometheus::Gauge& samples_per_second_;
  prometheus::Gauge& loss_;
  prometheus::Gauge& learning_rate_;
  prometheus::Gauge& epoch_;
  prometheus::Gauge& global_step_;
};

}  // namespace dtrain::trainer

#endif  // DTRAIN_TRAINER_REPORT_LIVE_METRICS_H_
