#include "trainer/train_options.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/machine_limits.h"
#include "base/status_macros.h"
#include "base/user_path.h"
#include "dist/backend/backend_names.h"
#include "models/model_catalog.h"
#include "models/state_dict/state_dict_path.h"
#include "trainer/report/step_log.h"

namespace dtrain::trainer {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("--", field, ": ", why));
}

// Built-in or registered (models/model_catalog.h).
absl::Status CheckModel(const std::string& model) {
  // The catalog's message lists the known models and the alwayslink hint.
  absl::StatusOr<models::ModelInfo> found = models::FindModel(model);
  if (found.ok()) return absl::OkStatus();
  return Invalid("model", std::string(found.status().message()));
}

bool Known(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// --device: -1 for "cpu" and "cuda" (no index given), N for "cuda:N".
absl::StatusOr<int> ParseDevice(const std::string& device) {
  if (device == "cpu" || device == "cuda") return -1;
  int index = -1;
  if (!absl::StartsWith(device, "cuda:") ||
      !absl::SimpleAtoi(device.substr(5), &index) || index < 0) {
    return Invalid("device",
                   absl::StrCat("'", device, "' is not cpu, cuda or cuda:N"));
  }
  return index;
}

}  // namespace

const std::vector<std::string>& KnownDatasets() {
  static const auto* const kNames = new std::vector<std::string>{
      "fashion-mnist", "mnist", "stl10", "synthetic", "imagefolder"};
  return *kNames;
}

absl::StatusOr<TrainOptions> ResolveDefaults(TrainOptions o) {
  DTRAIN_RETURN_IF_ERROR(CheckModel(o.model));
  // Registered models take the ConvNet's defaults.
  const bool resnet = o.model == "resnet18";
  if (!o.optimizer) o.optimizer = resnet ? "sgd" : "adadelta";
  const bool sgd = *o.optimizer == "sgd";
  if (!o.lr) o.lr = sgd ? 0.1 : 0.5;
  if (!o.momentum) o.momentum = sgd ? 0.9 : 0.0;
  if (!o.weight_decay) o.weight_decay = sgd ? 1e-4 : 0.0;
  if (!o.batch_size) o.batch_size = resnet ? 32 : 128;
  if (!o.epochs) o.epochs = resnet ? 2 : 1;
  if (!o.image_size && resnet && o.dataset == "stl10") o.image_size = 224;
  // The ImageNet tutorial's crop, for either model.
  if (!o.image_size && o.dataset == "imagefolder") o.image_size = 224;
  return o;
}

absl::Status Validate(const TrainOptions& o) {
  DTRAIN_RETURN_IF_ERROR(CheckModel(o.model));
  if (o.small_input_stem && o.model != "resnet18") {
    return Invalid("small_input_stem", "only resnet18 has this stem");
  }
  if (!Known(KnownDatasets(), o.dataset)) {
    return Invalid("dataset",
                   absl::StrCat("unknown dataset '", o.dataset, "'; known: ",
                                absl::StrJoin(KnownDatasets(), ", ")));
  }
  if (o.dataset == "stl10" && o.data_dir.empty()) {
    return Invalid("data_dir",
                   "stl10 needs the folder with train_X.bin, train_y.bin, "
                   "test_X.bin and test_y.bin");
  }
  if (o.dataset == "imagefolder" && o.data_dir.empty()) {
    return Invalid("data_dir",
                   "imagefolder needs the folder with train/ and val/, each "
                   "holding one folder of images per class");
  }
  if (o.image_size && *o.image_size < 1)
    return Invalid("image_size", absl::StrCat(*o.image_size, " is not >= 1"));
  // Bounds the validation resize (size * 256 / 224) and the batch memory.
  if (o.image_size && *o.image_size > 4096)
    return Invalid("image_size",
                   absl::StrCat(*o.image_size, " is not <= 4096"));
  if (o.train_limit && *o.train_limit < 1)
    return Invalid("train_limit", absl::StrCat(*o.train_limit, " is not >= 1"));
  if (o.val_limit && *o.val_limit < 1)
    return Invalid("val_limit", absl::StrCat(*o.val_limit, " is not >= 1"));
  if (o.dataset == "synthetic") {
    if (o.synthetic_shape.size() != 3 ||
        std::any_of(o.synthetic_shape.begin(), o.synthetic_shape.end(),
                    [](int64_t d) { return d < 1; })) {
      return Invalid("synthetic_shape",
                     "needs three positive sizes: channels,height,width");
    }
    if (o.synthetic_train_size < 1 || o.synthetic_val_size < 1)
      return Invalid("synthetic_train_size", "both splits need >= 1 example");
    if (o.synthetic_classes < 1)
      return Invalid("synthetic_classes", "needs >= 1 class");
    // Both splits are made in memory as float32, up front.
    double bytes = static_cast<double>(o.synthetic_train_size) +
                   static_cast<double>(o.synthetic_val_size);
    for (int64_t d : o.synthetic_shape) bytes *= static_cast<double>(d);
    bytes *= sizeof(float);
    const base::Limit memory = base::MemoryLimit();
    if (bytes > static_cast<double>(memory.max)) {
      return Invalid(
          "synthetic_train_size",
          absl::StrCat(o.synthetic_train_size, " + ", o.synthetic_val_size,
                       " examples of ", absl::StrJoin(o.synthetic_shape, "x"),
                       " floats need ", bytes / (1 << 20), " MiB, more than ",
                       memory.why));
    }
  }
  if (!o.batch_size || *o.batch_size < 1)
    return Invalid("batch_size", "must be >= 1 (per process)");
  DTRAIN_RETURN_IF_ERROR(
      base::CheckAtMost("--batch_size", *o.batch_size, base::BatchSizeLimit()));
  if (o.workers < 0)
    return Invalid("workers", absl::StrCat(o.workers, " is not >= 0"));
  // Each worker is a thread: beyond the bound thread creation fails.
  DTRAIN_RETURN_IF_ERROR(
      base::CheckAtMost("--workers", o.workers, base::ThreadLimit()));
  if (!o.epochs || *o.epochs < 1) return Invalid("epochs", "must be >= 1");
  if (o.max_steps < 0)
    return Invalid("max_steps", absl::StrCat(o.max_steps, " is not >= 0"));
  if (!o.optimizer || (*o.optimizer != "sgd" && *o.optimizer != "adadelta")) {
    return Invalid("optimizer",
                   absl::StrCat("unknown optimizer '", o.optimizer.value_or(""),
                                "'; known: adadelta, sgd"));
  }
  if (!o.lr || !(*o.lr > 0) || !std::isfinite(*o.lr))
    return Invalid("lr", "must be a finite number > 0");
  if (!o.momentum || !(*o.momentum >= 0) || !(*o.momentum < 1))
    return Invalid("momentum", "must be in [0, 1)");
  if (*o.optimizer == "adadelta" && *o.momentum != 0)
    return Invalid("momentum", "Adadelta has no momentum; leave it unset");
  if (!o.weight_decay || !(*o.weight_decay >= 0) ||
      !std::isfinite(*o.weight_decay))
    return Invalid("weight_decay", "must be a finite number >= 0");
  if (o.lr_step_epochs < 1) return Invalid("lr_step_epochs", "must be >= 1");
  if (!(o.lr_gamma > 0) || !std::isfinite(o.lr_gamma))
    return Invalid("lr_gamma", "must be a finite number > 0");
  if (o.lr_schedule != "step" && o.lr_schedule != "cosine") {
    return Invalid("lr_schedule",
                   absl::StrCat("unknown schedule '", o.lr_schedule,
                                "'; known: step, cosine"));
  }
  if (!(o.warmup_epochs >= 0) || !std::isfinite(o.warmup_epochs))
    return Invalid("warmup_epochs", "must be a finite number >= 0");
  if (o.lr_schedule == "cosine" &&
      o.warmup_epochs >= static_cast<double>(*o.epochs)) {
    return Invalid("warmup_epochs",
                   absl::StrCat(o.warmup_epochs, " leaves none of the ",
                                *o.epochs, " epoch(s) for the cosine decay"));
  }
  if (o.accumulate_steps < 1)
    return Invalid("accumulate_steps", "must be >= 1");
  // Keeps the effective global batch (batch x steps x world size) an int64.
  DTRAIN_RETURN_IF_ERROR(base::CheckAtMost(
      "--accumulate_steps", o.accumulate_steps,
      {base::kMaxBatchSize, "a fixed cap on the micro-batches of one step"}));
  if (o.amp != "off" && o.amp != "bf16" && o.amp != "fp16") {
    return Invalid("amp", absl::StrCat("unknown precision '", o.amp,
                                       "'; known: off, bf16, fp16"));
  }
  if (o.amp == "fp16" && o.device == "cpu") {
    return Invalid("amp",
                   "fp16 needs --device=cuda (LibTorch's CPU autocast is "
                   "bfloat16's: use --amp=bf16)");
  }
  if (!(o.clip_grad_norm >= 0) || !std::isfinite(o.clip_grad_norm))
    return Invalid("clip_grad_norm", "must be a finite number >= 0 (0: off)");
  if (o.evaluate && o.skip_validation)
    return Invalid("evaluate", "only validates; drop --skip_validation");
  if (o.evaluate && o.init_state_dict.empty() && !o.resume) {
    return Invalid("evaluate",
                   "needs weights: --init_state_dict, or --checkpoint_dir "
                   "with --resume");
  }
  if (!Known(backend::KnownBackends(), o.dist_backend)) {
    return Invalid(
        "dist_backend",
        absl::StrCat("unknown backend '", o.dist_backend, "'; known: ",
                     absl::StrJoin(backend::KnownBackends(), ", ")));
  }
  if (!o.shm && o.dist_backend != "gloo") {
    return Invalid("shm", absl::StrCat("--shm=false applies to the gloo "
                                       "backend, not ",
                                       o.dist_backend));
  }
  if (!absl::StartsWith(o.dist_url, "tcp://") &&
      !absl::StartsWith(o.dist_url, "file://") &&
      !absl::StartsWith(o.dist_url, "env://")) {
    return Invalid("dist_url", absl::StrCat("'", o.dist_url,
                                            "' is not tcp://host:port, "
                                            "file:///path or env://"));
  }
  if (o.timeout <= absl::ZeroDuration())
    return Invalid("timeout", "must be > 0");
  if (absl::StatusOr<int> index = ParseDevice(o.device); !index.ok())
    return index.status();
  if (o.dist_backend == "nccl" && o.device == "cpu")
    return Invalid("dist_backend", "nccl needs --device=cuda");
  if (o.dist_backend != "nccl" && o.device != "cpu") {
    return Invalid("dist_backend",
                   absl::StrCat("the ", o.dist_backend,
                                " backend reduces CPU tensors; use nccl with "
                                "--device=cuda"));
  }
  // Checked as a double, before the trainer converts it to bytes.
  DTRAIN_RETURN_IF_ERROR(base::CheckFiniteSize(
      "--bucket_cap_mb", o.bucket_cap_mb, 1 << 20, "MiB"));
  if (o.sync_batchnorm && !o.sync_gradients)
    return Invalid("sync_batchnorm",
                   "communicates batch statistics; --sync_gradients=false "
                   "measures training without communication");
  if (o.intra_op_threads < 1)
    return Invalid("intra_op_threads", "must be >= 1");
  DTRAIN_RETURN_IF_ERROR(base::CheckAtMost(
      "--intra_op_threads", o.intra_op_threads, base::ThreadLimit()));
  for (const auto& [flag, path] : {std::pair<const char*, const std::string*>{
                                       "init_state_dict", &o.init_state_dict},
                                   {"save_state_dict", &o.save_state_dict}}) {
    if (!path->empty() && !models::state_dict::IsStateDictPath(*path)) {
      return Invalid(flag,
                     absl::StrCat("'", *path, "': the supported formats are ",
                                  models::state_dict::kStateDictExtensions));
    }
  }
  if (o.init_state_dict.empty() &&
      (!o.init_state_dict_strict || !o.init_state_dict_exclude.empty())) {
    return Invalid(o.init_state_dict_strict ? "init_state_dict_exclude"
                                            : "init_state_dict_strict",
                   "needs --init_state_dict");
  }
  if (o.state_dict_with_checkpoints &&
      (o.save_state_dict.empty() || o.checkpoint_dir.empty()))
    return Invalid("state_dict_with_checkpoints",
                   "needs --save_state_dict and --checkpoint_dir");
  if (o.resume && o.checkpoint_dir.empty())
    return Invalid("resume", "needs --checkpoint_dir");
  if (o.checkpoint_every_steps < 0)
    return Invalid("checkpoint_every_steps", "must be >= 0");
  if (o.checkpoint_every_steps > 0 && o.checkpoint_dir.empty())
    return Invalid("checkpoint_every_steps", "needs --checkpoint_dir");
  if (o.keep_checkpoints < 1)
    return Invalid("keep_checkpoints", "must be >= 1");
  if (o.print_freq < 1) return Invalid("print_freq", "must be >= 1");
  if (o.num_sanity_val_steps < 0)
    return Invalid("num_sanity_val_steps", "must be >= 0");
  if (o.metrics_port < -1 || o.metrics_port > 65535) {
    return Invalid("metrics_port",
                   absl::StrCat(o.metrics_port,
                                " is not a port (0..65535; 0: a free one; -1: "
                                "off)"));
  }
  if (o.metrics_ranks != "0" && o.metrics_ranks != "all") {
    return Invalid("metrics_ranks",
                   absl::StrCat("'", o.metrics_ranks, "' is not 0 or all"));
  }
  if (o.metrics_bind.empty()) return Invalid("metrics_bind", "is empty");
  return absl::OkStatus();
}

absl::StatusOr<int> ChooseCudaDevice(const std::string& device,
                                     const RankPlacement& p,
                                     int visible_devices) {
  if (device == "cpu") return -1;
  DTRAIN_ASSIGN_OR_RETURN(const int requested, ParseDevice(device));
  const std::string flag = absl::StrCat("--device=", device, ": ");
  const std::string visible = absl::StrCat(
      visible_devices,
      visible_devices == 1 ? " CUDA device is" : " CUDA devices are",
      " visible");
  if (visible_devices < 1) {
    return absl::FailedPreconditionError(
        absl::StrCat(flag, "no CUDA device is visible to rank ", p.rank,
                     " (no GPU, or CUDA_VISIBLE_DEVICES hides them all)"));
  }
  if (requested >= 0) {
    if (requested < visible_devices) return requested;
    return absl::InvalidArgumentError(
        absl::StrCat(flag, "cuda:", requested, " requested but ", visible));
  }
  // One GPU per process, bound by the launcher.
  if (visible_devices == 1) return 0;
  if (p.local_rank < visible_devices && p.local_world_size <= visible_devices) {
    return p.local_rank;
  }
  if (p.local_inferred) {
    const std::string would =
        p.local_rank >= visible_devices
            ? absl::StrCat("so it would use cuda:", p.local_rank)
            : absl::StrCat("so all ", p.world_size,
                           " ranks are taken to run on this node");
    return absl::InvalidArgumentError(absl::StrCat(
        flag, "rank ", p.rank, " of ", p.world_size,
        " was given no local rank (no --local_rank, no launcher variable), ",
        would, ", but ", visible,
        ": pass --local_rank and --local_world_size, or start the ranks with "
        "a launcher"));
  }
  if (p.local_rank >= visible_devices) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, "local rank ", p.local_rank, " needs cuda:", p.local_rank,
        " but ", visible, " (local world size ", p.local_world_size, ")"));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      flag, p.local_world_size, " ranks on this node (local world size) but ",
      visible, ": start at most ", visible_devices,
      " ranks per node, one per GPU"));
}

absl::StatusOr<ProgressStyle> ParseProgressStyle(const std::string& text) {
  for (ProgressStyle style : {ProgressStyle::kAuto, ProgressStyle::kBar,
                              ProgressStyle::kLines, ProgressStyle::kNone}) {
    if (text == ProgressStyleName(style)) return style;
  }
  return Invalid("progress", absl::StrCat("unknown style '", text,
                                          "'; known: auto, bar, lines, none"));
}

const char* ProgressStyleName(ProgressStyle style) {
  switch (style) {
    case ProgressStyle::kAuto:
      return "auto";
    case ProgressStyle::kBar:
      return "bar";
    case ProgressStyle::kLines:
      return "lines";
    case ProgressStyle::kNone:
      return "none";
  }
  return "auto";
}

absl::Status CheckOutputPaths(const TrainOptions& o, int rank) {
  if (rank == 0) {
    if (!o.save_state_dict.empty()) {
      DTRAIN_RETURN_IF_ERROR(
          base::CheckWritableFile("--save_state_dict", o.save_state_dict));
    }
    if (!o.metrics_json.empty()) {
      DTRAIN_RETURN_IF_ERROR(
          base::CheckWritableFile("--metrics_json", o.metrics_json));
    }
    if (!o.checkpoint_dir.empty()) {
      DTRAIN_RETURN_IF_ERROR(
          base::CheckWritableDir("--checkpoint_dir", o.checkpoint_dir));
    }
  }
  // Empty for the ranks that write no log.
  const std::string log = StepLogPath(o.log_jsonl, rank);
  if (!log.empty())
    DTRAIN_RETURN_IF_ERROR(base::CheckWritableFile("--log_jsonl", log));
  return absl::OkStatus();
}

}  // namespace dtrain::trainer
