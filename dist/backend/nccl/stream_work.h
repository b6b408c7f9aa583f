// The Work handle of a collective that runs on a device stream. Its Wait does
// what PyTorch's NCCL work does: it makes the caller's current stream wait for
// the collective and returns without blocking the host, so that waiting for a
// gradient bucket or the per-step buffer broadcast never stalls the CPU that
// should be queuing the next kernels. Kernels queued afterwards on that stream
// see the results, and so do host reads through LibTorch (.cpu(), .item()),
// which synchronize that stream first.
//
// The host does block for a barrier (its point is that every rank reached it)
// and in WaitForResult, which a host read of the result needs; Wait returns
// the error when the collective has already failed.
// Failures found later by the watchdog fail the handle (IsCompleted, status())
// and every later collective of the backend.
#ifndef DTRAIN_DIST_BACKEND_NCCL_STREAM_WORK_H_
#define DTRAIN_DIST_BACKEND_NCCL_STREAM_WORK_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "dist/backend/nccl/comm_ops.h"
#include "dist/backend/work.h"

namespace dtrain::backend::nccl_internal {

enum class WorkKind { kCollective, kBarrier };

// How a Wait proceeds; the stream-ordering decision, apart from the device.
struct WaitPlan {
  bool order_stream = false;  // make the caller's stream wait for the event
  bool block_host = false;    // wait on the host until completion
};
WaitPlan PlanWait(WorkKind kind, bool completed);

class StreamWork : public internal::CompletionWork {
 public:
  // `event` fires when the collective has run; `ops` must outlive the handle
  // while it is not completed (the backend completes every handle before it
  // is destroyed).
  StreamWork(std::string what, WorkKind kind, std::shared_ptr<void> event,
             CommOps* ops);

  absl::Status Wait(absl::Duration timeout = absl::InfiniteDuration()) override;
  // Blocks the host until the watchdog completed it (backend.h).
  absl::Status WaitForResult(
      absl::Duration timeout = absl::InfiniteDuration()) override;

 private:
  const WorkKind kind_;
  const std::shared_ptr<void> event_;
  CommOps* const ops_;
};

}  // namespace dtrain::backend::nccl_internal

#endif  // DTRAIN_DIST_BACKEND_NCCL_STREAM_WORK_H_
