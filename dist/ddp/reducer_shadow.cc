// The reducer's part in uneven inputs (join.h): a joined rank's synchronised
// step, which issues what an active rank's Synchronize issues with zeros in
// every bucket. See reducer.h.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "base/torch_guard.h"
#include "dist/ddp/reducer.h"

namespace dtrain::ddp::internal {

absl::Status Reducer::ShadowSynchronize() {
  std::unique_lock<std::mutex> lock(mu_);
  DTRAIN_RETURN_IF_ERROR(broken_);
  if (step_started_) {
    return absl::FailedPreconditionError(absl::StrCat(
        comm_.prefix(), StepNameLocked(),
        ": a synchronised backward ran since the last SynchronizeGradients; "
        "a rank that has joined runs none"));
  }
  step_suffix_ = " (shadowed)";
  const std::string step_name = StepNameLocked();
  // Zeros: this rank contributes nothing. With gradient_as_bucket_view the
  // buckets are .grad, which then receives the active ranks' average.
  absl::Status s =
      base::GuardTorch(absl::StatusCode::kInternal, comm_.torch_prefix(), [&] {
        at::NoGradGuard no_grad;
        for (Param& p : params_) {
          if (!options_.gradient_as_bucket_view) continue;
          at::Tensor& grad = p.tensor.mutable_grad();
          if (!IsView(grad, p.view)) grad = p.view;
        }
        for (Bucket& b : buckets_) b.grad.buffer.zero_();
        return absl::OkStatus();
      });
  if (!s.ok()) {
    step_suffix_.clear();
    broken_ = s;
    return s;
  }
  first_hook_ = last_hook_ = absl::Now();
  std::fill(ready_.begin(), ready_.end(), 1);
  for (Bucket& b : buckets_) b.pending = 0;
  LaunchReady(/*in_backward=*/false);
  // Every parameter "used" here: the verdict is the active ranks'.
  at::Tensor unused_maps;
  absl::StatusOr<std::shared_ptr<backend::Work>> unused_work =
      ExchangeUnused(std::vector<char>(params_.size(), 0), &unused_maps);
  if (!unused_work.ok()) {
    step_suffix_.clear();
    broken_ = unused_work.status();
    return broken_;
  }
  lock.unlock();

  absl::Duration waited;
  absl::Status failure = WaitForBuckets(step_name, unused_work->get(), &waited);

  lock.lock();
  if (failure.ok()) failure = hook_error_;
  if (failure.ok()) failure = WriteAverages();
  step_suffix_.clear();
  if (!failure.ok()) {
    broken_ = failure;
    return failure;
  }
  ++steps_;
  KeepLaunchedWorks();
  ResetStep();
  if (*unused_work == nullptr) return absl::OkStatus();
  return CheckUnused(step_name, unused_maps);
}

}  // namespace dtrain::ddp::internal
