// The NCCL backend: collectives on CUDA tensors of one device per rank, through
// NCCL's C API.
//
// Construction shares NCCL's unique id from rank 0 through the store and
// creates one communicator (non-blocking, so that a rank that never arrives
// ends in a timeout rather than a hang). Every collective runs on the
// backend's own CUDA stream after the work already queued on the caller's
// current stream (an event orders them), so it reads what earlier kernels
// wrote while later kernels are not held back. Work::Wait makes the caller's
// current stream wait for the collective and returns without blocking the
// host (a barrier's Wait blocks); see stream_work.h. A watchdog thread
// completes Work handles as their events fire, polls NCCL's asynchronous
// errors, and aborts the communicator when a collective outlives the timeout;
// after that every call fails at once with the first error. Destroying the
// backend gives collectives in flight two seconds and then aborts them (see
// watchdog.h), so a rank that leaves on an error does not wait out the
// timeout.
//
// Devices: make the rank's device current (base::SetCurrentCudaDevice) before
// creating the backend, as train does. Calls switch to the backend's device
// when the caller's differs and switch back only to a device that already has
// a context (base/cuda_device.h), so they never create one on another GPU.
//
// A build without NCCL (see third_party/cuda_configure.bzl) still has this API;
// CreateNcclBackend then says it was built without NCCL and why.
#ifndef DTRAIN_DIST_BACKEND_NCCL_NCCL_BACKEND_H_
#define DTRAIN_DIST_BACKEND_NCCL_NCCL_BACKEND_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "dist/backend/backend.h"
#include "dist/backend/membership.h"

namespace dtrain::backend {

// NCCL's own knobs; who the ranks are, their store and the timeout (which
// bounds creating the communicator and every collective) come in a
// Membership (membership.h).
struct NcclBackendOptions {
  // The CUDA device this rank uses (usually its local rank: see
  // device_choice.h, and InitProcessGroup, which chooses it).
  int device = 0;
};

// kFailedPrecondition when built without NCCL or when the CUDA runtime sees no
// device (with the reason; the runtime's view, not LibTorch's: a CPU-only
// LibTorch on a GPU machine still creates the backend, but cannot make the CUDA
// tensors it needs), kInvalidArgument for a bad membership
// (Membership::Check, whatever the build) or device, kDeadlineExceeded when the
// other ranks do not arrive.
absl::StatusOr<std::unique_ptr<Backend>> CreateNcclBackend(
    const Membership& group, const NcclBackendOptions& options = {});

// True when this binary was built with NCCL; otherwise `reason` (if given) says
// what was missing.
bool NcclAvailable(std::string* reason = nullptr);

}  // namespace dtrain::backend

#endif  // DTRAIN_DIST_BACKEND_NCCL_NCCL_BACKEND_H_
