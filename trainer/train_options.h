// TrainOptions: everything one training run is configured with, named after
// the tutorials' flags, in sections that each go to the part of the run that
// consumes them (the section's header says which, and validates it): the
// model, the data, the optimizer and its schedule, data parallelism,
// checkpoints, reporting and the launch. The //trainer:train binary fills it
// from flags (one flags file per section, so that --help shows them
// grouped); tests fill it directly.
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

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainer/options/checkpoint_options.h"
#include "trainer/options/data_options.h"
#include "trainer/options/data_parallel_options.h"
#include "trainer/options/launch_options.h"
#include "trainer/options/model_options.h"
#include "trainer/options/optimizer_options.h"
#include "trainer/report/report_options.h"

namespace dtrain::trainer {

struct TrainOptions {
  ModelOptions model;
  DataOptions data;
  OptimizerOptions optim;
  DataParallelOptions parallel;
  CheckpointOptions checkpoint;
  ReportOptions report;
  LaunchOptions launch;

  // Seeds the model's initial weights, the shuffle and the augmentations; the
  // same on every rank.
  uint64_t seed = 0;
  // Only validate the model (loaded from model.init_state_dict, or from the
  // newest checkpoint with checkpoint.resume) and report, as the tutorials'
  // --evaluate.
  bool evaluate = false;
  // Skip the validation pass after each epoch.
  bool skip_validation = false;
  // Validation batches per rank run before the first step, so that a broken
  // validation split or model fails at once (Lightning's
  // num_sanity_val_steps); 0: none.
  int64_t num_sanity_val_steps = 2;
};

// The model's defaults for the fields left unset (see above);
// kInvalidArgument for an unknown model.
absl::StatusOr<TrainOptions> ResolveDefaults(TrainOptions options);

// Checks resolved options: each section with its own validator, then what
// spans sections; kInvalidArgument naming the first bad flag and its value.
// Does not touch files or the network. Thread, size and batch
// knobs are held to base/machine_limits.h's bounds (workers and
// intra_op_threads to ThreadLimit, bucket_cap_mb and the synthetic dataset to
// the memory, batch_size and accumulate_steps to 2^20).
absl::Status Validate(const TrainOptions& options);

// Whether this rank can write its outputs, before anything takes time: rank
// 0's --save_state_dict, --metrics_json, --checkpoint_dir and --log_jsonl,
// and on every rank a --log_jsonl that holds "{rank}". kInvalidArgument
// naming the flag, the path and the reason otherwise. Creates nothing.
absl::Status CheckOutputPaths(const TrainOptions& options, int rank);

}  // namespace dtrain::trainer

#endif  // DTRAIN_TRAINER_TRAIN_OPTIONS_H_
