#include "dist/backend/nccl/stream_work.h"

#include <utility>

#include "base/status_macros.h"

namespace dtrain::backend::nccl_internal {

WaitPlan PlanWait(WorkKind kind, bool completed) {
  WaitPlan plan;
  if (completed) return plan;  // the status says everything
  if (kind == WorkKind::kBarrier) {
    plan.block_host = true;
  } else {
    plan.order_stream = true;
  }
  return plan;
}

StreamWork::StreamWork(std::string what, WorkKind kind,
                       std::shared_ptr<void> event, CommOps* ops)
    : CompletionWork(std::move(what)),
      kind_(kind),
      event_(std::move(event)),
      ops_(ops) {}

absl::Status StreamWork::Wait(absl::Duration timeout) {
  const WaitPlan plan = PlanWait(kind_, IsCompleted());
  if (plan.block_host) return CompletionWork::Wait(timeout);
  if (plan.order_stream) {
    DTRAIN_RETURN_IF_ERROR(ops_->OrderCurrentStreamAfter(event_.get()));
  }
  // OK while it runs; its error once it failed.
  return status();
}

absl::Status StreamWork::WaitForResult(absl::Duration timeout) {
  return CompletionWork::Wait(timeout);
}

}  // namespace dtrain::backend::nccl_internal
