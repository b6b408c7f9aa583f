// Periodic model averaging for post-local SGD (PyTorch's
// PeriodicModelAverager): after each optimizer step, call
// AverageParameters; from step `warmup_steps` on, every `period`-th call
// replaces each parameter by its average over ranks (one allreduce per
// dtype of all the parameters, flattened).
//
//   PeriodicModelAverager averager(backend, {.period = 4,
//                                            .warmup_steps = 100});
//   ... optimizer.step();
//   DTRAIN_RETURN_IF_ERROR(averager.AverageParameters(model->parameters()));
//
// Give warmup_steps the hook's start step (hooks/local_sgd_hook.h), as
// PyTorch asks: until then DDP averages gradients and the parameters agree.
//
// Collective: every rank calls AverageParameters once per step, in the same
// order as its other collectives, with the same parameters. Buffers are not
// averaged (DDP's buffer broadcast keeps them). Thread-compatible; the
// backend must outlive the averager.
#ifndef DTRAIN_DIST_DDP_MODEL_AVERAGER_H_
#define DTRAIN_DIST_DDP_MODEL_AVERAGER_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "dist/backend/backend.h"
#include "dist/backend/small_collectives.h"

namespace dtrain::ddp {

struct ModelAveragingOptions {
  // Average every `period` steps (>= 1).
  int64_t period = 4;
  // Steps before the first averaging (>= 0).
  int64_t warmup_steps = 0;
  // Bounds each wait.
  absl::Duration timeout = absl::InfiniteDuration();
};

class PeriodicModelAverager {
 public:
  PeriodicModelAverager(backend::Backend& backend,
                        const ModelAveragingOptions& options);

  // kInvalidArgument for bad options; check before the first step.
  absl::Status Validate() const;

  // Averages `parameters` when this step is due, then counts the step.
  // Errors name the rank and step; a failed collective breaks the backend.
  absl::Status AverageParameters(const std::vector<at::Tensor>& parameters);

  // Calls so far; set it when resuming (the steps already trained).
  int64_t step() const { return step_; }
  void set_step(int64_t step) { step_ = step; }
  // Whether the next AverageParameters averages, and whether the last one
  // did (the ranks' parameters then agree).
  bool Due() const;
  bool averaged_last() const { return averaged_last_; }

 private:
  backend::SmallCollectives comm_;
  ModelAveragingOptions options_;
  int64_t step_ = 0;
  bool averaged_last_ = false;
};

}  // namespace dtrain::ddp

#endif  // DTRAIN_DIST_DDP_MODEL_AVERAGER_H_
