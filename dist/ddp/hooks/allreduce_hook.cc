#include "dist/ddp/hooks/allreduce_hook.h"

#include "base/status_macros.h"

namespace dtrain::ddp::hooks {

std::unique_ptr<BucketWork> AllReduceHook::Launch(GradBucket& bucket,
                                                  BucketComm& comm) {
  return std::make_unique<WaitWork>(
      comm,
      comm.AllReduce(bucket.buffer, backend::ReduceOp::kAverage, "allreduce"),
      "allreduce");
}

absl::StatusOr<BucketWork::Progress> WaitWork::Continue() {
  DTRAIN_RETURN_IF_ERROR(comm_.Wait(*work_, stage_));
  return Progress::kDone;
}

}  // namespace dtrain::ddp::hooks
