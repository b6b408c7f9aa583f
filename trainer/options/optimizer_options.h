// The optimizer-and-schedule section of train's options: the optimizer and
// its rates, the learning-rate schedule, how long to train, and the training
// step's knobs (gradient accumulation, mixed precision, clipping). Consumed
// by run_parts (MakeOptimizer, MakeSchedule), the training step and the loop.
// A plain value type.
#ifndef DTRAIN_TRAINER_OPTIONS_OPTIMIZER_OPTIONS_H_
#define DTRAIN_TRAINER_OPTIONS_OPTIMIZER_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/types/optional.h"

namespace dtrain::trainer {

struct OptimizerOptions {
  // "sgd", "adadelta", "adam" or "adamw" (PyTorch's betas 0.9, 0.999 and eps
  // 1e-8); unset: the model's default (ResolveDefaults).
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
  absl::optional<int64_t> epochs;
  // Stop after this many optimizer steps in total (0: no limit).
  int64_t max_steps = 0;
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
};

// kInvalidArgument naming the flag. optimizer, lr, momentum, weight_decay
// and epochs must be resolved (ResolveDefaults).
absl::Status ValidateOptimizerOptions(const OptimizerOptions& o);

}  // namespace dtrain::trainer

#endif  // DTRAIN_TRAINER_OPTIONS_OPTIMIZER_OPTIONS_H_
