// The CUDA device a process or thread works on: counting devices, making one
// current, and a scoped guard that switches to a device and back without
// creating contexts the caller never asked for.
//
// Since CUDA 12, cudaSetDevice creates the device's primary context (a few
// hundred MiB of device memory). A guard that restored device 0 on a thread
// that had never used it would therefore put a context on GPU 0 from every
// rank. Like PyTorch, the guard switches back only to a device that already
// has a context (ShouldRestoreDevice); a rank that made its device current
// first (SetCurrentCudaDevice) never switches at all.
//
// Built without the CUDA runtime (third_party/cuda_configure.bzl found none),
// the functions report that instead. Thread safety: the current device is
// per thread in CUDA, and every function here is safe to call from any thread.
#ifndef DTRAIN_BASE_CUDA_DEVICE_H_
#define DTRAIN_BASE_CUDA_DEVICE_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/optional.h"

namespace dtrain::base {

// How many devices the CUDA runtime sees (after CUDA_VISIBLE_DEVICES). No
// device, or no driver, is 0 devices, not an error: the error cases are a
// build without the CUDA runtime and a driver that fails for another reason
// (kFailedPrecondition with the runtime's words).
absl::StatusOr<int> CudaDeviceCount();

// Makes `device` the calling thread's current device, creating its context.
// kInvalidArgument when it does not exist (naming how many do),
// kFailedPrecondition without the CUDA runtime.
absl::Status SetCurrentCudaDevice(int device);

// Whether `device` has an active primary context, asked from the driver
// without creating one; nullopt when the driver cannot say.
absl::optional<bool> HasPrimaryContext(int device);

// The guard's policy: after working on `target`, switch back to `previous`
// (-1: unknown) only when it differs and has a context already, or when that
// cannot be told (then keeping the caller's device matters more than the
// memory).
bool ShouldRestoreDevice(int previous, int target,
                         absl::optional<bool> previous_has_context);

// Makes `device` current for its scope (nothing happens when it already is)
// and afterwards restores the caller's device where ShouldRestoreDevice says.
// Not movable; use on one thread.
class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(int device);
  ~CudaDeviceGuard();
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;

 private:
  int previous_ = -1;
  int device_ = -1;
};

}  // namespace dtrain::base

#endif  // DTRAIN_BASE_CUDA_DEVICE_H_
