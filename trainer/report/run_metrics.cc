#include "trainer/report/run_metrics.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "base/atomic_file.h"
#include "nlohmann/json.hpp"

namespace dtrain::trainer {
namespace {

using nlohmann::json;

template <typename T>
json Optional(const absl::optional<T>& value) {
  return value ? json(*value) : json(nullptr);
}

json ConfigJson(const TrainOptions& o) {
  return json{
      {"model", o.model.name},
      {"small_input_stem", o.model.small_input_stem},
      {"dataset", o.data.dataset},
      {"data_dir", o.data.data_dir},
      {"image_size", Optional(o.data.image_size)},
      {"train_limit", Optional(o.data.train_limit)},
      {"val_limit", Optional(o.data.val_limit)},
      {"batch_size", Optional(o.data.batch_size)},
      {"workers", o.data.workers},
      {"even_batches", o.data.even_batches},
      {"divide_by_initial_world_size", o.data.divide_by_initial_world_size},
      {"epochs", Optional(o.optim.epochs)},
      {"max_steps", o.optim.max_steps},
      {"num_sanity_val_steps", o.num_sanity_val_steps},
      {"optimizer", Optional(o.optim.optimizer)},
      {"lr", Optional(o.optim.lr)},
      {"momentum", Optional(o.optim.momentum)},
      {"weight_decay", Optional(o.optim.weight_decay)},
      {"lr_schedule", o.optim.lr_schedule},
      {"lr_step_epochs", o.optim.lr_step_epochs},
      {"lr_gamma", o.optim.lr_gamma},
      {"warmup_epochs", o.optim.warmup_epochs},
      {"accumulate_steps", o.optim.accumulate_steps},
      {"amp", o.optim.amp},
      {"clip_grad_norm", o.optim.clip_grad_norm},
      {"evaluate", o.evaluate},
      {"fp16_allreduce", o.parallel.comm_hook == "fp16"},
      {"comm_hook", o.parallel.comm_hook},
      {"gradient_as_bucket_view", o.parallel.gradient_as_bucket_view},
      {"static_graph", o.parallel.static_graph},
      {"powersgd_rank", o.parallel.powersgd_rank},
      {"powersgd_start_step", o.parallel.powersgd_start_step},
      {"powersgd_min_compression_rate",
       o.parallel.powersgd_min_compression_rate},
      {"powersgd_error_feedback", o.parallel.powersgd_error_feedback},
      {"powersgd_warm_start", o.parallel.powersgd_warm_start},
      {"powersgd_seed", o.parallel.powersgd_seed},
      {"local_sgd_start_step", o.parallel.local_sgd_start_step},
      {"local_sgd_period", o.parallel.local_sgd_period},
      {"seed", o.seed},
      {"dist_backend", o.launch.dist_backend},
      {"dist_url", o.launch.dist_url},
      {"shm", o.launch.shm},
      {"init_state_dict", o.model.init_state_dict},
      {"init_state_dict_strict", o.model.init_state_dict_strict},
      {"init_state_dict_exclude", o.model.init_state_dict_exclude},
      {"save_state_dict", o.checkpoint.save_state_dict},
      {"device", o.launch.device},
      {"bucket_cap_mb", o.parallel.bucket_cap_mb},
      {"sync_gradients", o.parallel.sync_gradients},
      {"sync_batchnorm", o.parallel.sync_batchnorm},
      {"zero", o.parallel.zero},
      {"intra_op_threads", o.launch.intra_op_threads},
      {"timeout_seconds", absl::ToDoubleSeconds(o.launch.timeout)},
      {"metrics_port", o.report.metrics_port},
      {"metrics_ranks", o.report.metrics_ranks},
      {"metrics_bind", o.report.metrics_bind},
      {"metrics_run_id", o.report.metrics_run_id},
      {"log_jsonl", o.report.log_jsonl},
  };
}

json TimelineJson(const absl::optional<DdpTimeline>& t) {
  if (!t.has_value()) return nullptr;
  json buckets = json::array();
  for (const DdpTimeline::Bucket& b : t->buckets) {
    json j{{"bytes", b.bytes}, {"launch_seconds", b.launch_seconds}};
    j["start_seconds"] = t->timed ? json(b.start_seconds) : json(nullptr);
    j["finish_seconds"] = t->timed ? json(b.finish_seconds) : json(nullptr);
    buckets.push_back(std::move(j));
  }
  json j{{"steps", t->steps},
         {"backward_seconds", t->backward_seconds},
         {"hooks_seconds", t->hooks_seconds},
         {"synchronize_seconds", t->synchronize_seconds},
         {"buckets", std::move(buckets)}};
  j["communication_seconds"] =
      t->timed ? json(t->communication_seconds) : json(nullptr);
  j["overlap_seconds"] = t->timed ? json(t->overlap_seconds) : json(nullptr);
  return j;
}

json EpochJson(const EpochMetrics& e) {
  return json{
      {"epoch", e.epoch},
      {"steps", e.steps},
      {"samples", e.samples},
      {"lr", e.lr},
      {"epoch_seconds", e.epoch_seconds},
      {"samples_per_second", e.samples_per_second},
      {"train_loss", e.train_loss},
      {"train_top1", e.train_top1},
      {"train_top5", e.train_top5},
      {"data_seconds", e.data_seconds},
      {"exposed_communication_seconds", e.exposed_communication_seconds},
      {"step_seconds_mean", e.step_seconds_mean},
      {"step_seconds_p50", e.step_seconds_p50},
      {"step_seconds_p90", e.step_seconds_p90},
      {"step_seconds_max", e.step_seconds_max},
      {"step_seconds_histogram",
       {{"bounds", StepHistogramBounds()},
        {"counts", e.step_histogram_counts},
        {"sum", e.step_seconds_sum}}},
      {"val_loss", Optional(e.val_loss)},
      {"val_top1", Optional(e.val_top1)},
      {"val_top5", Optional(e.val_top5)},
      {"val_seconds", e.val_seconds},
      {"skipped_steps", e.skipped_steps},
      {"grad_norm_mean", Optional(e.grad_norm_mean)},
      {"loss_scale", Optional(e.loss_scale)},
      {"ddp_timeline", TimelineJson(e.ddp_timeline)},
  };
}

}  // namespace

const std::vector<double>& StepHistogramBounds() {
  static const auto* const kBounds = new std::vector<double>{
      0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
  return *kBounds;
}

std::vector<int64_t> StepHistogram(const std::vector<double>& step_seconds) {
  const std::vector<double>& bounds = StepHistogramBounds();
  std::vector<int64_t> counts(bounds.size() + 1, 0);
  for (double s : step_seconds) {
    const size_t i =
        std::lower_bound(bounds.begin(), bounds.end(), s) - bounds.begin();
    ++counts[i];
  }
  return counts;
}

std::string ToJson(const RunMetrics& m) {
  json epochs = json::array();
  for (const EpochMetrics& e : m.epochs) epochs.push_back(EpochJson(e));
  json config = ConfigJson(m.options);
  config["world_size"] = m.world_size;
  const json out{
      {"format", "dtrain.metrics.v1"},
      {"config", config},
      {"backend", m.backend},
      {"backend_layout", m.backend_layout},
      {"device", m.device},
      {"data", m.data},
      {"launch_source", m.launch_source},
      {"parameters", m.parameters},
      {"sync_batchnorm_layers", m.sync_batchnorm_layers},
      {"epochs", epochs},
      {"best_top1", m.best_top1},
      {"global_step", m.global_step},
      {"ranks_identical", Optional(m.ranks_identical)},
      {"resumed_from", m.resumed_from},
      {"optimizer_state_bytes", m.optimizer_state_bytes},
      {"peak_rss_bytes", m.peak_rss_bytes},
      {"pss_bytes", m.pss_bytes},
      {"startup_seconds", m.startup_seconds},
      {"wall_seconds", m.wall_seconds},
      {"metrics_url", m.metrics_url},
  };
  return out.dump(2) + "\n";
}

absl::Status WriteMetricsJson(const std::string& path, const RunMetrics& m) {
  return base::WriteFileAtomically(path, ToJson(m));
}

}  // namespace dtrain::trainer
