// The sweep's results as Prometheus metrics, named by Prometheus's
// conventions (base units, _seconds, _ratio, _total), one series per
// configuration with labels {implementation, backend, model, comm_hook,
// zero, world_size, batch_size, run_id}:
//
//   ddp_epoch_duration_seconds                   median epoch time
//   ddp_no_communication_epoch_duration_seconds  the same without gradient sync
//   ddp_wall_duration_seconds                    run time from outside
//   ddp_startup_duration_seconds                 process start to first step
//   ddp_samples_per_second                       throughput, all processes
//   ddp_speedup_ratio                            vs 1 process
//   ddp_efficiency_ratio                         speedup / processes
//   ddp_communication_efficiency_ratio           no-communication time / time
//   ddp_exposed_communication_seconds            allreduce time not hidden
//   ddp_exposed_communication_ratio              its share of the epoch
//   ddp_step_communication_seconds               step time minus the bound's
//   ddp_data_wait_seconds                        waiting for batches
//   ddp_step_duration_seconds                    histogram of step times
//   ddp_runs_total{status="ok"|"failed"}         trainings run
//
// Pushed to a Pushgateway (job "dtrain_scaling", grouped by run_id), or
// served on /metrics while the sweep runs and for a while after it.
#ifndef DTRAIN_EXPERIMENTS_PROMETHEUS_EXPORT_H_
#define DTRAIN_EXPERIMENTS_PROMETHEUS_EXPORT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "experiments/results.h"
#include "prometheus/collectable.h"

namespace dtrain::experiments {

// Update from one thread; collecting (an Exposer's scrape, a push) may run
// concurrently from others.
class ScalingMetrics {
 public:
  explicit ScalingMetrics(std::string run_id);

  // Replaces every series with `rows` (call after each configuration, so a
  // scrape during the sweep sees the results so far).
  void Update(const std::vector<ResultRow>& rows);

  // Always collects the latest Update: register it with an Exposer once.
  std::shared_ptr<prometheus::Collectable> collectable() const;
  const std::string& run_id() const { return run_id_; }

 private:
  class Current;
  const std::string run_id_;
  std::shared_ptr<Current> current_;
};

// Pushes `metrics` to the Pushgateway at host:port (PUT: replaces this
// run_id's group). kUnavailable naming the address and the HTTP status or
// connection error.
absl::Status PushToGateway(const ScalingMetrics& metrics,
                           const std::string& address);

// The text exposition format of the current values (for tests and
// `promtool check metrics`).
std::string ExpositionText(const ScalingMetrics& metrics);

}  // namespace dtrain::experiments

#endif  // DTRAIN_EXPERIMENTS_PROMETHEUS_EXPORT_H_
