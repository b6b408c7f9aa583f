// One optimizer step of the training loop, over one or more micro-batches:
//
//   TrainStep step(options, model, ddp, optimizer, device);
//   DTRAIN_RETURN_IF_ERROR(step.Begin(k));       // k micro-batches
//   for (int j = 0; j < k; ++j) {
//     DTRAIN_RETURN_IF_ERROR(step.MicroBatch(images[j], labels[j]));
//   }
//   DTRAIN_ASSIGN_OR_RETURN(StepOutcome outcome, step.Finish());
//
// Gradient accumulation: the first k - 1 micro-batches run forward and
// backward under DDP's no_sync and the last one synchronises, each loss
// weighted 1/k, so .grad ends as the average over ranks and micro-batches:
// with equal micro-batches, the gradient of one batch k times the size.
// Mixed precision (amp.h): forward and loss under autocast; with float16, a
// dynamic loss scale, and a step whose averaged gradients are not finite is
// skipped on every rank alike. Clipping: the total 2-norm of the averaged
// (and unscaled) gradients is clipped to clip_grad_norm before the step.
//
// Collective through DDP: every rank must run the same k and call the
// methods in the same order. Not thread-safe; the model, DDP wrapper and
// optimizer must outlive the object.
#ifndef DTRAIN_TRAINER_TRAIN_STEP_H_
#define DTRAIN_TRAINER_TRAIN_STEP_H_

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/optional.h"
#include "dist/ddp/ddp.h"
#include "dist/ddp/model_averager.h"
#include "dist/zero/sharded_optimizer.h"
#include "models/model.h"
#include "trainer/amp.h"
#include "trainer/trace/step_phases.h"

namespace dtrain::trainer {

struct StepOptions {
  // Micro-batches per optimizer step at most (the loop passes fewer at the
  // end of an epoch); >= 1.
  int64_t accumulate_steps = 1;
  Precision precision = Precision::kFloat32;
  // Clip the gradients' total 2-norm to this (0: no clipping); >= 0.
  double clip_grad_norm = 0;
};

// What one optimizer step saw, summed over its micro-batches on this rank.
struct StepOutcome {
  double loss_sum = 0;  // per-example loss summed over the examples
  int64_t examples = 0;
  int64_t correct1 = 0;
  int64_t correct5 = 0;
  // The gradients' total 2-norm before clipping; set with clip_grad_norm.
  absl::optional<double> grad_norm;
  // Skipped for inf/NaN gradients (float16 loss scaling).
  bool skipped = false;
  // The loss scale the step used (1 without float16).
  double loss_scale = 1;
  // When its parts ran.
  StepPhases phases;
};

// The generator seed for one micro-batch's random draws (dropout): a function
// of the run's seed, the rank and the micro-batch's index in the run only, so
// that a resumed run draws what the uninterrupted one did. Below 2^63.
uint64_t MicroBatchSeed(uint64_t seed, int rank, int64_t micro_batch);

class TrainStep {
 public:
  // `options` as validated by the trainer (CheckPrecision for `device`).
  TrainStep(const StepOptions& options, models::Model& model,
            ddp::DistributedDataParallel& ddp,
            torch::optim::Optimizer& optimizer, const c10::Device& device);

  // Starts a step of `micro_batches` (1..accumulate_steps) micro-batches:
  // zeroes the gradients. kInvalidArgument outside that range,
  // kFailedPrecondition while a step is open.
  absl::Status Begin(int64_t micro_batches);

  // Forward, loss and backward of the next micro-batch ([B, ...] images and
  // [B] labels on the device); the last one of the step synchronises the
  // gradients' allreduce (overlapped with its backward). kInternal naming the
  // failure when LibTorch throws; DDP's errors as they are.
  absl::Status MicroBatch(const at::Tensor& images, const at::Tensor& labels);

  // After the last micro-batch: waits for the averaged gradients, unscales,
  // clips, and steps the optimizer (unless the gradients were not finite).
  absl::StatusOr<StepOutcome> Finish();

  // Uneven inputs (dist/ddp/join.h), on a rank that has joined: once DDP's
  // shadow of a step has left the active ranks' average in .grad, Finish's
  // optimizer step over it (unscaling, the loss scale's update, clipping,
  // the model averager), so that the optimizer's state and the loss scale
  // stay equal to the active ranks'. kFailedPrecondition while a step is
  // open.
  absl::Status ShadowStep();

  // Post-local SGD: after every optimizer step (skipped or not), `averager`
  // averages the parameters when due. Null: none. It must outlive the
  // object.
  void set_model_averager(ddp::PeriodicModelAverager* averager) {
    averager_ = averager;
  }

  // ZeRO (dist/zero/sharded_optimizer.h): its Step replaces the optimizer's
  // (the optimizer given to the constructor is then not stepped), and at
  // stage 2 unscaling and clipping work on its shares' gradients. Null: none.
  // It must outlive the object.
  void set_sharded_optimizer(zero::ShardedOptimizer* zero) { zero_ = zero; }

  // Float16 loss scaling's state (null without float16).
  const LossScaler* loss_scaler() const {
    return scaler_.has_value() ? &*scaler_ : nullptr;
  }

 private:
  // Finish's work after the gradients are averaged, into `outcome`.
  absl::Status StepOptimizer(StepOutcome* outcome);

  StepOptions options_;
  models::Model& model_;
  ddp::DistributedDataParallel& ddp_;
  torch::optim::Optimizer& optimizer_;
  c10::Device device_;
  std::vector<at::Tensor> parameters_;
  absl::optional<LossScaler> scaler_;
  ddp::PeriodicModelAverager* averager_ = nullptr;
  zero::ShardedOptimizer* zero_ = nullptr;

  int64_t micro_batches_ = 0;  // in the open step; 0 when none is open
  int64_t done_ = 0;           // of them so far
  StepOutcome outcome_;
};

}  // namespace dtrain::trainer

#endif  // DTRAIN_TRAINER_TRAIN_STEP_H_
