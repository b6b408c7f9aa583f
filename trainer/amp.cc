#include "trainer/amp.h"

#include <ATen/autocast_mode.h>
#include <ATen/ops/isfinite.h>
#include <ATen/ops/stack.h>
#include <torch/version.h>

#include <vector>

#include "absl/strings/str_cat.h"

namespace dtrain::trainer {
namespace {

// LibTorch 2.4 replaced the per-device autocast setters by ones that take the
// device type (the old ones stay, deprecated).
#if TORCH_VERSION_MAJOR > 2 || \
    (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
bool AutocastEnabled(bool cuda) {
  return at::autocast::is_autocast_enabled(cuda ? at::kCUDA : at::kCPU);
}
void SetAutocastEnabled(bool cuda, bool on) {
  at::autocast::set_autocast_enabled(cuda ? at::kCUDA : at::kCPU, on);
}
c10::ScalarType AutocastDtype(bool cuda) {
  return at::autocast::get_autocast_dtype(cuda ? at::kCUDA : at::kCPU);
}
void SetAutocastDtype(bool cuda, c10::ScalarType dtype) {
  at::autocast::set_autocast_dtype(cuda ? at::kCUDA : at::kCPU, dtype);
}
#else
bool AutocastEnabled(bool cuda) {
  return cuda ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
}
void SetAutocastEnabled(bool cuda, bool on) {
  if (cuda) {
    at::autocast::set_enabled(on);
  } else {
    at::autocast::set_cpu_enabled(on);
  }
}
c10::ScalarType AutocastDtype(bool cuda) {
  return cuda ? at::autocast::get_autocast_gpu_dtype()
              : at::autocast::get_autocast_cpu_dtype();
}
void SetAutocastDtype(bool cuda, c10::ScalarType dtype) {
  if (cuda) {
    at::autocast::set_autocast_gpu_dtype(dtype);
  } else {
    at::autocast::set_autocast_cpu_dtype(dtype);
  }
}
#endif

}  // namespace

absl::StatusOr<Precision> ParsePrecision(absl::string_view name) {
  if (name == "off" || name == "fp32") return Precision::kFloat32;
  if (name == "bf16") return Precision::kBFloat16;
  if (name == "fp16") return Precision::kFloat16;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown precision '", name, "' (known: off, bf16, fp16)"));
}

const char* PrecisionName(Precision precision) {
  switch (precision) {
    case Precision::kBFloat16:
      return "bf16";
    case Precision::kFloat16:
      return "fp16";
    case Precision::kFloat32:
      break;
  }
  return "off";
}

absl::Status CheckPrecision(Precision precision, const c10::Device& device) {
  if (precision == Precision::kFloat16 && !device.is_cuda()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--amp=fp16 needs a CUDA device (training on ",
                     device.str(), "); on the CPU use --amp=bf16"));
  }
  if (precision != Precision::kFloat32 && !device.is_cpu() &&
      !device.is_cuda()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--amp=", PrecisionName(precision),
                     " is not supported on ", device.str()));
  }
  return absl::OkStatus();
}

AutocastGuard::AutocastGuard(Precision precision, const c10::Device& device) {
  if (precision == Precision::kFloat32) return;
  active_ = true;
  cuda_ = device.is_cuda();
  was_enabled_ = AutocastEnabled(cuda_);
  previous_dtype_ = AutocastDtype(cuda_);
  SetAutocastDtype(cuda_, precision == Precision::kFloat16
                              ? c10::ScalarType::Half
                              : c10::ScalarType::BFloat16);
  SetAutocastEnabled(cuda_, true);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (!active_) return;
  // What torch.autocast's __exit__ does: the cache of casted weights is only
  // valid while the weights do not change.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  SetAutocastEnabled(cuda_, was_enabled_);
  SetAutocastDtype(cuda_, previous_dtype_);
}

LossScaler::LossScaler(LossScalerOptions options)
    : options_(options), scale_(options.init_scale) {}

bool LossScaler::UnscaleAndCheck(
    const std::vector<at::Tensor>& parameters) const {
  const double inverse = 1.0 / scale_;
  // One flag per gradient, read back once: an item() per parameter would
  // wait for the device that many times every step.
  std::vector<at::Tensor> finite;
  for (const at::Tensor& p : parameters) {
    at::Tensor grad = p.grad();
    if (!grad.defined()) continue;
    grad.mul_(inverse);
    finite.push_back(at::isfinite(grad).all());
  }
  return !finite.empty() && !at::stack(finite).all().item<bool>();
}

void LossScaler::Update(bool found_non_finite) {
  if (found_non_finite) {
    scale_ *= options_.backoff_factor;
    clean_steps_ = 0;
    ++skipped_;
    return;
  }
  if (++clean_steps_ >= options_.growth_interval) {
    scale_ *= options_.growth_factor;
    clean_steps_ = 0;
  }
}

}  // namespace dtrain::trainer
