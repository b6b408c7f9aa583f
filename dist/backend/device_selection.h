// A process's CUDA device, chosen (device_choice.h) and made current before
// anything touches CUDA, so that no context lands on another rank's GPU.
// InitProcessGroup selects a rank's after the rendezvous; a process that
// meets no rendezvous before its first backend (an elastic job's joiner)
// selects its own from its launcher's placement.
//
// Thread safety: the device is made current on the calling thread only.
#ifndef DTRAIN_DIST_BACKEND_DEVICE_SELECTION_H_
#define DTRAIN_DIST_BACKEND_DEVICE_SELECTION_H_

#include <string>

#include "absl/status/statusor.h"
#include "dist/backend/device_choice.h"

namespace dtrain::backend {

// The CUDA device for `device` ("cpu", "cuda" or "cuda:N") at `placement`,
// made current; -1 for "cpu". ParseDevice's errors, kFailedPrecondition "no
// CUDA device is usable" where LibTorch has no CUDA or sees no GPU, then
// ChooseCudaDevice's and base::SetCurrentCudaDevice's.
absl::StatusOr<int> SelectCudaDevice(const std::string& device,
                                     const RankPlacement& placement);

}  // namespace dtrain::backend

#endif  // DTRAIN_DIST_BACKEND_DEVICE_SELECTION_H_
