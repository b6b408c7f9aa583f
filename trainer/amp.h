// Mixed precision for the training step, the counterparts of torch.autocast
// and torch.cuda.amp.GradScaler:
//
// - AutocastGuard turns LibTorch's autocast on for one device type and one
//   lower-precision dtype over a scope (the forward pass and the loss):
//   matrix products and convolutions run in bfloat16 or float16, reductions
//   and the loss stay in float32, parameters and gradients stay float32.
// - LossScaler keeps float16 gradients from underflowing: the loss is
//   multiplied by a scale before backward, the gradients divided by it before
//   the optimizer step; a step whose gradients hold inf or NaN is skipped and
//   the scale halved, and the scale doubles after `growth_interval` clean
//   steps (GradScaler's defaults). bfloat16 has float32's range and needs no
//   scaling.
//
// Thread safety: autocast state is per thread in LibTorch; an AutocastGuard
// affects the thread that made it, and must be destroyed on that thread, in
// reverse order of creation. A LossScaler is not thread-safe.
#ifndef DTRAIN_TRAINER_AMP_H_
#define DTRAIN_TRAINER_AMP_H_

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dtrain::trainer {

enum class Precision { kFloat32, kBFloat16, kFloat16 };

// "off", "bf16", "fp16" and back; kInvalidArgument listing the names.
absl::StatusOr<Precision> ParsePrecision(absl::string_view name);
const char* PrecisionName(Precision precision);

// Whether `precision` can run on `device`: bf16 on the CPU and on CUDA, fp16
// on CUDA only (LibTorch's CPU autocast is bfloat16's). kInvalidArgument
// saying which to use instead.
absl::Status CheckPrecision(Precision precision, const c10::Device& device);

class AutocastGuard {
 public:
  // Autocast on for `device`'s type with `precision`'s dtype; nothing for
  // kFloat32. `precision` must have passed CheckPrecision for the device.
  AutocastGuard(Precision precision, const c10::Device& device);
  // Restores the previous state; the outermost guard also drops autocast's
  // cache of casted weights, which are stale after the optimizer step.
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool active_ = false;
  bool cuda_ = false;
  bool was_enabled_ = false;
  c10::ScalarType previous_dtype_ = c10::ScalarType::Undefined;
};

struct LossScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

class LossScaler {
 public:
  explicit LossScaler(LossScalerOptions options = {});

  double scale() const { return scale_; }
  // Steps skipped so far for inf/NaN gradients.
  int64_t skipped_steps() const { return skipped_; }

  // Divides every defined gradient by the scale in place and reports whether
  // any element is inf or NaN. Call once per step, after the gradients are
  // final (averaged over ranks: every rank then sees the same answer).
  bool UnscaleAndCheck(const std::vector<at::Tensor>& parameters) const;

  // Records the step's outcome: halves the scale after a non-finite step,
  // grows it after growth_interval finite ones in a row.
  void Update(bool found_non_finite);

 private:
  LossScalerOptions options_;
  double scale_;
  int64_t clean_steps_ = 0;
  int64_t skipped_ = 0;
};

}  // namespace dtrain::trainer

#endif  // DTRAIN_TRAINER_AMP_H_
