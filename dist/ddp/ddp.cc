#include "dist/ddp/ddp.h"

#include <ATen/core/grad_mode.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "dist/ddp/collectives.h"
#include "dist/ddp/layer_order.h"
#include "dist/ddp/model_sync.h"
#include "dist/ddp/reducer.h"

namespace dtrain::ddp {

DistributedDataParallel::NoSyncGuard::NoSyncGuard(DistributedDataParallel& ddp)
    : ddp_(ddp), previous_(ddp.gradient_sync()) {
  ddp_.set_gradient_sync(false);
}

DistributedDataParallel::NoSyncGuard::~NoSyncGuard() {
  ddp_.set_gradient_sync(previous_);
}

DistributedDataParallel::DistributedDataParallel(
    std::shared_ptr<torch::nn::Module> module, backend::Backend& backend,
    const DdpOptions& options)
    : module_(std::move(module)), backend_(backend), options_(options) {}

// Out of line: the members' types are complete only here.
DistributedDataParallel::~DistributedDataParallel() {
  // The layers may outlive the wrapper: they must not call back into it.
  if (join_ != nullptr) Detach();
}

absl::StatusOr<std::unique_ptr<DistributedDataParallel>>
DistributedDataParallel::Create(std::shared_ptr<torch::nn::Module> module,
                                backend::Backend& backend,
                                const DdpOptions& options) {
  // Checked before any collective, so that every rank fails alike.
  const std::string prefix = internal::ErrorPrefix(backend.rank());
  if (module == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, "module is null"));
  }
  if (options.first_bucket_cap_bytes <= 0 || options.bucket_cap_bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        prefix, "bucket caps must be positive, got first_bucket_cap_bytes = ",
        options.first_bucket_cap_bytes,
        " and bucket_cap_bytes = ", options.bucket_cap_bytes));
  }
  std::unique_ptr<DistributedDataParallel> ddp(
      new DistributedDataParallel(std::move(module), backend, options));
  DTRAIN_ASSIGN_OR_RETURN(
      ddp->model_sync_,
      internal::ModelSync::Create(*ddp->module_, backend, options.timeout,
                                  options.init_sync));
  DTRAIN_ASSIGN_OR_RETURN(
      ddp->reducer_,
      internal::Reducer::Create(ddp->model_sync_->trainable_parameters(),
                                ddp->model_sync_->control_device(), backend,
                                ddp->options_, ddp->gradient_sync_));
  return ddp;
}

absl::Status DistributedDataParallel::RegisterCommHook(
    std::shared_ptr<CommHook> hook) {
  return reducer_->RegisterCommHook(std::move(hook));
}

CommHook& DistributedDataParallel::comm_hook() { return reducer_->comm_hook(); }

const std::vector<BucketInfo>& DistributedDataParallel::buckets() const {
  return reducer_->buckets();
}

const StepStats& DistributedDataParallel::last_step_stats() const {
  return reducer_->last_step_stats();
}

absl::Status DistributedDataParallel::PrepareForward() {
  DTRAIN_RETURN_IF_ERROR(reducer_->CheckReadyForForward());
  if (join_ != nullptr) DTRAIN_RETURN_IF_ERROR(NotifyJoin());
  const bool sync_buffers = options_.broadcast_buffers &&
                            require_forward_param_sync_ &&
                            model_sync_->has_buffers();
  // PyTorch's rule: after a forward that will not synchronise, the next
  // PrepareForward skips the buffer broadcast.
  require_forward_param_sync_ =
      at::GradMode::is_enabled() && gradient_sync_.load();
  if (!sync_buffers) return absl::OkStatus();
  const absl::Time start = absl::Now();
  // In a Join, rank 0 may have joined with stale buffers (PyTorch's rule).
  absl::Status s = model_sync_->BroadcastBuffers(
      absl::StrCat("buffers before ", reducer_->StepName()),
      join_ != nullptr ? round_.authoritative_rank : 0);
  reducer_->RecordBufferBroadcast(absl::Now() - start, s);
  return s;
}

absl::Status DistributedDataParallel::ConfirmLastStep() {
  return reducer_->ConfirmLastStep();
}

absl::Status DistributedDataParallel::SynchronizeGradients() {
  if (!gradient_sync_.load()) return absl::OkStatus();
  return reducer_->Synchronize();
}

}  // namespace dtrain::ddp
