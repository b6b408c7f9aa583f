#include "trainer/train_options.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "base/status_macros.h"
#include "base/user_path.h"
#include "trainer/options/common.h"
#include "trainer/report/step_log.h"

namespace dtrain::trainer {
namespace {

using options_internal::Invalid;

}  // namespace

absl::StatusOr<TrainOptions> ResolveDefaults(TrainOptions o) {
  DTRAIN_RETURN_IF_ERROR(ValidateModelOptions(o.model));
  // Registered models take the ConvNet's defaults.
  const bool resnet = o.model.name == "resnet18";
  OptimizerOptions& opt = o.optim;
  if (!opt.optimizer) opt.optimizer = resnet ? "sgd" : "adadelta";
  const bool sgd = *opt.optimizer == "sgd";
  const bool adam = *opt.optimizer == "adam" || *opt.optimizer == "adamw";
  // PyTorch's defaults for Adam and AdamW (AdamW's weight decay 0.01).
  if (!opt.lr) opt.lr = sgd ? 0.1 : adam ? 1e-3 : 0.5;
  if (!opt.momentum) opt.momentum = sgd ? 0.9 : 0.0;
  if (!opt.weight_decay) {
    opt.weight_decay = sgd ? 1e-4 : *opt.optimizer == "adamw" ? 1e-2 : 0.0;
  }
  if (!opt.epochs) opt.epochs = resnet ? 2 : 1;
  DataOptions& data = o.data;
  if (!data.batch_size) data.batch_size = resnet ? 32 : 128;
  if (!data.image_size && resnet && data.dataset == "stl10")
    data.image_size = 224;
  // The ImageNet tutorial's crop, for either model.
  if (!data.image_size && data.dataset == "imagefolder") data.image_size = 224;
  return o;
}

absl::Status Validate(const TrainOptions& o) {
  DTRAIN_RETURN_IF_ERROR(ValidateModelOptions(o.model));
  DTRAIN_RETURN_IF_ERROR(ValidateDataOptions(o.data));
  DTRAIN_RETURN_IF_ERROR(ValidateOptimizerOptions(o.optim));
  if (o.optim.amp == "fp16" && o.launch.device == "cpu") {
    return Invalid("amp",
                   "fp16 needs --device=cuda (LibTorch's CPU autocast is "
                   "bfloat16's: use --amp=bf16)");
  }
  if (o.evaluate && o.skip_validation)
    return Invalid("evaluate", "only validates; drop --skip_validation");
  if (o.evaluate && o.model.init_state_dict.empty() && !o.checkpoint.resume) {
    return Invalid("evaluate",
                   "needs weights: --init_state_dict, or --checkpoint_dir "
                   "with --resume");
  }
  DTRAIN_RETURN_IF_ERROR(ValidateLaunchOptions(o.launch));
  DTRAIN_RETURN_IF_ERROR(ValidateDataParallelOptions(o.parallel));
  DTRAIN_RETURN_IF_ERROR(ValidateCheckpointOptions(o.checkpoint));
  if (!o.data.even_batches && o.optim.accumulate_steps > 1) {
    // A rank's last step could span fewer micro-batches than another's: the
    // ranks would disagree on which backward synchronises.
    return Invalid("even_batches",
                   "false needs --accumulate_steps=1 (every rank must run "
                   "no_sync alike, as with PyTorch's Join)");
  }
  if (!o.data.even_batches && o.parallel.comm_hook == "local_sgd") {
    // Its model averager's collectives come after the step, outside what a
    // joined rank shadows, and its hook does not average gradients.
    return Invalid("even_batches",
                   "false does not combine with --comm_hook=local_sgd");
  }
  if (!o.data.even_batches && o.parallel.zero > 0) {
    // Not built: a joined rank's shadow of the share step and allgather.
    return Invalid("even_batches", "false does not combine with --zero yet");
  }
  if (o.launch.elastic && o.parallel.zero > 0) {
    // A dead rank would take its shard of the optimizer state with it.
    return Invalid("elastic", "does not combine with --zero");
  }
  if (o.launch.elastic && o.parallel.sync_batchnorm) {
    // Its layers hold the first generation's backend.
    return Invalid("elastic", "does not combine with --sync_batchnorm yet");
  }
  if (o.launch.elastic && !o.data.even_batches) {
    // The ranks still training and those shadowing them would not regroup
    // at the same step.
    return Invalid("elastic", "does not combine with --even_batches=false");
  }
  if (o.launch.min_ranks < 1) return Invalid("min_ranks", "must be >= 1");
  if (o.launch.max_ranks < 0) return Invalid("max_ranks", "must be >= 0");
  if (o.launch.max_ranks > 0 && o.launch.max_ranks < o.launch.min_ranks)
    return Invalid("max_ranks", "must be 0 or at least --min_ranks");
  if (o.launch.elastic && !o.report.trace.empty()) {
    // A generation renumbers its ranks and meets in a new store namespace:
    // one file would need the generations' parts joined.
    return Invalid("elastic", "does not combine with --trace yet");
  }
  if (o.launch.join && !o.launch.elastic)
    return Invalid("join", "needs --elastic");
  if (o.num_sanity_val_steps < 0)
    return Invalid("num_sanity_val_steps", "must be >= 0");
  return ValidateReportOptions(o.report);
}

absl::Status CheckOutputPaths(const TrainOptions& o, int rank) {
  if (rank == 0) {
    const CheckpointOptions& c = o.checkpoint;
    if (!c.save_state_dict.empty()) {
      DTRAIN_RETURN_IF_ERROR(
          base::CheckWritableFile("--save_state_dict", c.save_state_dict));
    }
    if (!o.report.metrics_json.empty()) {
      DTRAIN_RETURN_IF_ERROR(
          base::CheckWritableFile("--metrics_json", o.report.metrics_json));
    }
    if (!c.checkpoint_dir.empty()) {
      DTRAIN_RETURN_IF_ERROR(
          base::CheckWritableDir("--checkpoint_dir", c.checkpoint_dir));
    }
  }
  // Empty for the ranks that write no log.
  const std::string log = StepLogPath(o.report.log_jsonl, rank);
  if (!log.empty())
    DTRAIN_RETURN_IF_ERROR(base::CheckWritableFile("--log_jsonl", log));
  return absl::OkStatus();
}

}  // namespace dtrain::trainer
