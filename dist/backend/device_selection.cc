#include "dist/backend/device_selection.h"

#include <torch/cuda.h>

#include "absl/strings/str_cat.h"
#include "base/cuda_device.h"
#include "base/status_macros.h"

namespace dtrain::backend {

absl::StatusOr<int> SelectCudaDevice(const std::string& device,
                                     const RankPlacement& placement) {
  DTRAIN_RETURN_IF_ERROR(ParseDevice(device).status());
  if (device == "cpu") return -1;
  if (!torch::cuda::is_available()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--device=", device,
        ": no CUDA device is usable (this LibTorch has no CUDA, or no GPU is "
        "visible); set LIBTORCH_HOME to a CUDA-enabled LibTorch (see the "
        "README) or train with --device=cpu --dist_backend=gloo"));
  }
  DTRAIN_ASSIGN_OR_RETURN(const int visible, base::CudaDeviceCount());
  DTRAIN_ASSIGN_OR_RETURN(const int chosen,
                          ChooseCudaDevice(device, placement, visible));
  DTRAIN_RETURN_IF_ERROR(base::SetCurrentCudaDevice(chosen));
  return chosen;
}

}  // namespace dtrain::backend
