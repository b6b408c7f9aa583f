// What a training run measured, per epoch and in total, and its JSON form
// (--metrics_json), which the experiment runner reads:
// Every field, its unit and the rank it comes from: docs/FORMATS.md.
//
//   {"format": "dtrain.metrics.v1",
//    "config": {"model": "convnet", "batch_size": 64, "world_size": 2, ...},
//    "epochs": [{"epoch": 0, "train_loss": 0.52, "train_top1": 81.3,
//                "epoch_seconds": 41.2, "samples_per_second": 1456.3, ...}],
//    "best_top1": 85.1, "global_step": 469, "wall_seconds": 44.0, ...}
//
// Times are seconds; accuracies percent. Values measured on every rank are
// combined as the field says (the slowest rank for the training pass's
// times, exact sums for losses and accuracies); the rest are rank 0's own.
#ifndef DTRAIN_TRAINER_REPORT_RUN_METRICS_H_
#define DTRAIN_TRAINER_REPORT_RUN_METRICS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/optional.h"
#include "trainer/train_options.h"

namespace dtrain::trainer {

// DDP's timeline of a synchronised step (ddp::StepStats), rank 0's, averaged
// over the epoch's synchronised steps except the run's first (which includes
// lazy start-up). Offsets count from the step's first gradient hook.
struct DdpTimeline {
  int64_t steps = 0;
  // From the first gradient hook to the last.
  double backward_seconds = 0;
  // Inside the hooks: copies into buckets and launches.
  double hooks_seconds = 0;
  // In SynchronizeGradients: launches left, waits, copies into .grad.
  double synchronize_seconds = 0;
  // Whether the backend timed its collectives (Work::times); without it the
  // fields below that depend on it stay unset.
  bool timed = false;
  // From the first bucket's allreduce starting to the last one finishing.
  double communication_seconds = 0;
  // The part of it while backward still ran (until the last hook).
  double overlap_seconds = 0;
  struct Bucket {
    int64_t bytes = 0;
    double launch_seconds = 0;
    // Started running (after the collectives before it) and finished.
    double start_seconds = 0;
    double finish_seconds = 0;
  };
  std::vector<Bucket> buckets;
};

struct EpochMetrics {
  int64_t epoch = 0;
  // Optimizer steps and examples (all ranks) in this run's part of the epoch
  // (a resumed epoch counts from where it resumed).
  int64_t steps = 0;
  int64_t samples = 0;
  double lr = 0;
  // Training pass, from asking for the first batch to the last step, slowest
  // rank.
  double epoch_seconds = 0;
  double samples_per_second = 0;
  // Over all ranks' examples.
  double train_loss = 0;
  double train_top1 = 0;
  double train_top5 = 0;
  // Summed over the epoch, slowest rank: waiting for batches, and waiting for
  // gradient allreduces that backward did not hide.
  double data_seconds = 0;
  double exposed_communication_seconds = 0;
  // Rank 0's step times (data wait excluded).
  double step_seconds_mean = 0;
  double step_seconds_p50 = 0;
  double step_seconds_p90 = 0;
  double step_seconds_max = 0;
  // Rank 0's step times as a histogram over StepHistogramBounds(): counts[i]
  // steps took at most bounds[i] and more than bounds[i - 1]; the last count
  // is for those above every bound. Not cumulative. In JSON:
  // "step_seconds_histogram": {"bounds": [...], "counts": [...], "sum": s}.
  std::vector<int64_t> step_histogram_counts;
  double step_seconds_sum = 0;
  // Validation over the whole test split (unset when skipped).
  absl::optional<double> val_loss;
  absl::optional<double> val_top1;
  absl::optional<double> val_top5;
  double val_seconds = 0;  // rank 0's
  // Optimizer steps skipped for non-finite float16 gradients (--amp=fp16).
  int64_t skipped_steps = 0;
  // The gradients' 2-norm before clipping, averaged over the epoch's steps
  // (with --clip_grad_norm).
  absl::optional<double> grad_norm_mean;
  // The float16 loss scale at the epoch's end (--amp=fp16).
  absl::optional<double> loss_scale;
  // With gradient sync, after the run's first step.
  absl::optional<DdpTimeline> ddp_timeline;
};

struct RunMetrics {
  TrainOptions options;
  int world_size = 1;
  std::string backend;
  // Which ranks share a host, where the backend knows (Backend::layout).
  std::string backend_layout;
  std::string device;
  std::string data;
  // The launcher rank 0 found (LaunchSourceName: "openmpi", "slurm", ...), so
  // a run shows which environment it took its rank and world size from.
  std::string launch_source;
  int64_t parameters = 0;
  // Batch norms that ran as SyncBatchNorm (--sync_batchnorm with 2+ ranks).
  int sync_batchnorm_layers = 0;
  std::vector<EpochMetrics> epochs;
  double best_top1 = 0;
  int64_t global_step = 0;
  // Whether every rank ended with bit-identical parameters; unset when not
  // checked (one rank, or gradient sync off).
  absl::optional<bool> ranks_identical;
  // The checkpoint this run resumed from, if any.
  std::string resumed_from;
  // Per rank, at the end: the bytes of the optimizer state it keeps (with
  // --zero its shares' only), its peak resident memory (getrusage's
  // ru_maxrss, which counts in full every shared page the rank touched) and
  // its proportional set size (PSS: shared pages divided among the processes
  // that map them; 0 where not measured). Empty when not measured
  // (evaluation only).
  std::vector<int64_t> optimizer_state_bytes;
  std::vector<int64_t> peak_rss_bytes;
  std::vector<int64_t> pss_bytes;
  // Rank 0's, from the process start (or the start of Train) to the first
  // step, and to the end.
  double startup_seconds = 0;
  double wall_seconds = 0;
  // Where rank 0 served live metrics (--metrics_port), "" when it did not:
  // the scrapes it answered are part of the measured times.
  std::string metrics_url;
};

// Upper bounds, in seconds, of the step-time histogram buckets: 1 ms to 10 s,
// as Prometheus histograms usually go.
const std::vector<double>& StepHistogramBounds();

// The step-time histogram of `step_seconds` (EpochMetrics's layout).
std::vector<int64_t> StepHistogram(const std::vector<double>& step_seconds);

// The JSON text described above (pretty-printed, one trailing newline).
std::string ToJson(const RunMetrics& metrics);

// Writes ToJson(metrics) to `path` atomically.
absl::Status WriteMetricsJson(const std::string& path,
                              const RunMetrics& metrics);

}  // namespace dtrain::trainer

#endif  // DTRAIN_TRAINER_REPORT_RUN_METRICS_H_
