// TrainOptions: everything one training run is configured with, named after
// the tutorials' flags. The //trainer:train binary fills it from flags; tests
// and the experiment runner fill it directly.
//
// Fields left unset (absl::nullopt) take the defaults of the chosen model, as
// the tutorials have them: the book's ConvNet trains with Adadelta (lr 0.5,
// batch 128, 1 epoch), the AWS tutorial's ResNet-18 with SGD (lr 0.1,
// momentum 0.9, weight decay 1e-4, batch 32, 2 epochs, STL-10 at 224 px).
// Models a library registers (models/model_catalog.h) take the ConvNet's.
// ResolveDefaults fills them; Validate checks the result.
#ifndef DTRAIN_TRAINER_TRAIN_OPTIONS_H_
#define DTRAIN_TRAINER_TRAIN_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/optional.h"

namespace dtrain::trainer {

// How rank 0 reports progress.
enum class ProgressStyle {
  kAuto,   // a bar on a terminal, plain lines otherwise
  kBar,    // an in-place bar (carriage returns)
  kLines,  // one line every print_freq batches, as the tutorials print
  kNone,
};

struct TrainOptions {
  // Model: a name of models/model_catalog.h ("convnet", "resnet18", or one a
  // library linked into the program registered).
  std::string model = "convnet";
  // ResNet-18's 3x3 stride-1 stem for small images.
  bool small_input_stem = false;

  // Data: "fashion-mnist" (default, Debian's dataset-fashion-mnist), "mnist",
  // "stl10" (needs data_dir), "synthetic", or "imagefolder" (needs data_dir
  // with train/ and val/, one folder of JPEG or PNG images per class).
  std::string dataset = "fashion-mnist";
  // Empty: the dataset's default location (Fashion-MNIST's Debian path).
  std::string data_dir;
  // Resize images to image_size x image_size; unset: STL-10 for ResNet-18 is
  // resized to 224 as in the AWS tutorial, everything else stays as stored.
  // For imagefolder, the crop size (default 224): RandomResizedCrop on
  // train, Resize(image_size * 256 / 224) + CenterCrop on val.
  absl::optional<int64_t> image_size;
  // Train on the first train_limit examples only (quick runs, tests); for
  // imagefolder, whose files are sorted by class, on train_limit examples
  // spread evenly over the folder.
  absl::optional<int64_t> train_limit;
  absl::optional<int64_t> val_limit;
  // The synthetic dataset: examples in the training and validation split, and
  // the shape of one example.
  int64_t synthetic_train_size = 2048;
  int64_t synthetic_val_size = 512;
  std::vector<int64_t> synthetic_shape = {1, 28, 28};
  int64_t synthetic_classes = 10;

  // Per process, as in the tutorials; the global batch is batch_size *
  // world_size.
  absl::optional<int64_t> batch_size;
  // Loader threads per process (0: batches are prepared on the training
  // thread).
  int workers = 0;
  absl::optional<int64_t> epochs;
  // Stop after this many optimizer steps in total (0: no limit).
  int64_t max_steps = 0;
  // Skip the validation pass after each epoch.
  bool skip_validation = false;
  // Validation batches per rank run before the first step, so that a broken
  // validation split or model fails at once (Lightning's
  // num_sanity_val_steps); 0: none.
  int64_t num_sanity_val_steps = 2;

  // Optimizer: "sgd" or "adadelta".
  absl::optional<std::string> optimizer;
  absl::optional<double> lr;
  absl::optional<double> momentum;
  absl::optional<double> weight_decay;
  // The learning-rate schedule (optim/lr_schedule.h), set per optimizer
  // step: "step" (lr x lr_gamma every lr_step_epochs epochs) or "cosine" (to 0
  // over the run's epochs), after a linear warmup over warmup_epochs
  // (fractional allowed; 0: none).
  std::string lr_schedule = "step";
  int64_t lr_step_epochs = 30;
  double lr_gamma = 0.1;
  double warmup_epochs = 0;

  // Training step (trainer/train_step.h). Micro-batches per optimizer step:
  // gradients are averaged over accumulate_steps batches of batch_size
  // before each step (DDP's no_sync on all but the last), so the effective
  // global batch is batch_size * accumulate_steps * world_size. max_steps,
  // checkpoint_every_steps and progress count optimizer steps.
  int64_t accumulate_steps = 1;
  // Mixed precision (trainer/amp.h): "off", "bf16" (CPU or CUDA autocast) or
  // "fp16" (CUDA autocast with dynamic loss scaling).
  std::string amp = "off";
  // Clip the averaged gradients' total 2-norm to this before each step (0:
  // no clipping).
  double clip_grad_norm = 0;
  // Only validate the model (loaded from init_state_dict, or from the newest
  // checkpoint with resume) and report, as the tutorials' --evaluate.
  bool evaluate = false;
  // Seeds the model's initial weights, the shuffle and the augmentations; the
  // same on every rank.
  uint64_t seed = 0;

  // Distribution.
  std::string dist_backend = "gloo";
  std::string dist_url = "env://";
  // gloo: shared memory between the ranks of a host (BackendConfig::shm).
  bool shm = true;
  // Explicit rank layout; unset: from the launcher's environment.
  absl::optional<int> world_size;
  absl::optional<int> rank;
  absl::optional<int> local_rank;
  // Ranks on this node; needed with local_rank when no launcher says.
  absl::optional<int> local_world_size;
  absl::optional<std::string> master_addr;
  absl::optional<int> master_port;
  // Bounds rendezvous and every collective.
  absl::Duration timeout = absl::Minutes(5);
  // "cpu", "cuda" (cuda:<local rank>) or "cuda:N".
  std::string device = "cpu";
  // DDP's gradient bucket caps, in MiB (PyTorch's bucket_cap_mb).
  double bucket_cap_mb = 25;
  // DDP sends float32 gradients as float16, divided by the world size before
  // the sum (PyTorch's fp16_compress_hook): half the bytes.
  bool fp16_allreduce = false;
  // false trains every rank on its shard without averaging gradients: the
  // no-communication bound the experiment runner compares against. Not a
  // way to train a model.
  bool sync_gradients = true;
  // ResNet-18's batch norms as SyncBatchNorm (dist/ddp/sync_batch_norm.h):
  // statistics over the global batch. No effect with one rank, or on a model
  // without batch norm (the ConvNet; the trainer says so).
  bool sync_batchnorm = false;
  // LibTorch intra-op threads per process; several processes on few cores
  // oversubscribe otherwise.
  int intra_op_threads = 1;

  // Checkpoints (rank 0 writes; every rank loads). Empty: none.
  std::string checkpoint_dir;
  // PyTorch-compatible weights (models/state_dict): every rank loads
  // init_state_dict before training (a checkpoint resumed from overrides it);
  // rank 0 writes save_state_dict at the end, and with every checkpoint when
  // state_dict_with_checkpoints (so that it holds the newest checkpointed
  // weights should the run end early). ".safetensors", ".pt" or ".pth".
  // Empty: none.
  std::string init_state_dict;
  std::string save_state_dict;
  bool state_dict_with_checkpoints = false;
  // How init_state_dict is matched to the model (models/state_dict's
  // LoadOptions): false allows names missing from the file or not in the
  // model (PyTorch's strict=False); the excluded names or prefixes ("fc")
  // keep their fresh initialisation, to fine-tune with a new head.
  bool init_state_dict_strict = true;
  std::vector<std::string> init_state_dict_exclude;
  // Continue from the newest valid checkpoint in checkpoint_dir (starting
  // afresh, with a message, when there is none).
  bool resume = false;
  // Also checkpoint every N optimizer steps inside an epoch (0: at the end of
  // each epoch only).
  int64_t checkpoint_every_steps = 0;
  int keep_checkpoints = 2;

  // Rank 0 writes per-epoch metrics and the configuration here (JSON).
  std::string metrics_json;
  ProgressStyle progress = ProgressStyle::kAuto;
  // Batches between progress lines (and --log_jsonl lines).
  int print_freq = 10;

  // Live metrics while the run lasts (trainer/report/live_report.h,
  // docs/MONITORING.md). metrics_port: -1 off, 0 a free port, else rank 0
  // serves Prometheus's /metrics on it, or with metrics_ranks "all" every
  // rank on metrics_port + its local rank. metrics_bind: the address served
  // on ("0.0.0.0": every interface, since Prometheus scrapes from another
  // host). metrics_run_id: a run_id label on every series ("" for none).
  int metrics_port = -1;
  std::string metrics_ranks = "0";  // "0" or "all"
  std::string metrics_bind = "0.0.0.0";
  std::string metrics_run_id;
  // One JSON line per logged step and epoch end; rank 0 only unless the path
  // holds "{rank}" (trainer/report/step_log.h). Empty: none.
  std::string log_jsonl;
};

// Defaults of the chosen model for every unset field (see the file comment).
// kInvalidArgument for an unknown model, listing the known ones.
absl::StatusOr<TrainOptions> ResolveDefaults(TrainOptions options);

// Checks resolved options; kInvalidArgument naming the first bad field and
// its value. Does not touch files or the network. Thread, size and batch
// knobs are held to base/machine_limits.h's bounds (workers and
// intra_op_threads to ThreadLimit, bucket_cap_mb and the synthetic dataset to
// the memory, batch_size and accumulate_steps to 2^20).
absl::Status Validate(const TrainOptions& options);

// Whether this rank can write its outputs, before anything takes time: rank
// 0's --save_state_dict, --metrics_json, --checkpoint_dir and --log_jsonl,
// and on every rank a --log_jsonl that holds "{rank}". kInvalidArgument
// naming the flag, the path and the reason otherwise. Creates nothing.
absl::Status CheckOutputPaths(const TrainOptions& options, int rank);

// Where a rank runs, as far as choosing its GPU goes (rendezvous::LaunchEnv's
// fields).
struct RankPlacement {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  // No flag or launcher gave the local rank and size, so they are the global
  // ones (LaunchEnv::local_inferred): right on one node only.
  bool local_inferred = false;
};

// The CUDA device a rank trains on, worked out before anything creates a CUDA
// context: -1 for "cpu", N for "cuda:N", and for "cuda" the local rank, except
// that a single visible device is every local rank's: a launcher that binds
// one GPU per process (Slurm's --gpus-per-task, CUDA_VISIBLE_DEVICES per
// rank) leaves each process cuda:0, and two ranks sharing one GPU are NCCL's
// to refuse. `device` is TrainOptions::device; `visible_devices` what the
// CUDA runtime counts (after CUDA_VISIBLE_DEVICES). Pure: touches no GPU.
//
// Errors name the numbers they compare. kInvalidArgument for a malformed
// `device`, for cuda:N with N >= visible_devices, and for "cuda" when this
// rank's local rank, or the node's local world size, exceeds the visible
// devices (every rank of an overfull node fails alike, not only those past
// the end); with local_inferred the message says that no local rank was
// given and how to give one. kFailedPrecondition when no device is visible.
absl::StatusOr<int> ChooseCudaDevice(const std::string& device,
                                     const RankPlacement& placement,
                                     int visible_devices);

// "auto", "bar", "lines", "none" and back; kInvalidArgument listing them.
absl::StatusOr<ProgressStyle> ParseProgressStyle(const std::string& text);
const char* ProgressStyleName(ProgressStyle style);

// The known dataset names, for flag help and messages.
const std::vector<std::string>& KnownDatasets();

}  // namespace dtrain::trainer

#endif  // DTRAIN_TRAINER_TRAIN_OPTIONS_H_
