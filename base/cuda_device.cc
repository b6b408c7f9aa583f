#include "base/cuda_device.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "third_party/cuda_config.h"

#if DTRAIN_HAVE_NCCL
#include <cuda_runtime.h>
#include <dlfcn.h>
#endif

namespace dtrain::base {

bool ShouldRestoreDevice(int previous, int target,
                         absl::optional<bool> previous_has_context) {
  if (previous < 0 || previous == target) return false;
  return previous_has_context.value_or(true);
}

#if !DTRAIN_HAVE_NCCL

namespace {
absl::Status NoRuntime() {
  return absl::FailedPreconditionError(
      absl::StrCat("this binary was built without the CUDA runtime (",
                   DTRAIN_NCCL_MISSING_REASON, ")"));
}
}  // namespace

absl::StatusOr<int> CudaDeviceCount() { return NoRuntime(); }
absl::Status SetCurrentCudaDevice(int) { return NoRuntime(); }
absl::optional<bool> HasPrimaryContext(int) { return absl::nullopt; }
CudaDeviceGuard::CudaDeviceGuard(int device) : device_(device) {}
CudaDeviceGuard::~CudaDeviceGuard() = default;

#else  // DTRAIN_HAVE_NCCL

namespace {

std::string CudaText(cudaError_t e) {
  return absl::StrCat(cudaGetErrorName(e), ": ", cudaGetErrorString(e));
}

// The three driver entry points HasPrimaryContext needs, looked up once from
// the driver library the runtime loads anyway, so that nothing links against
// libcuda (absent on machines without a GPU).
struct DriverApi {
  using Init = int (*)(unsigned int);
  using DeviceGet = int (*)(int*, int);
  using PrimaryCtxGetState = int (*)(int, unsigned int*, int*);
  Init init = nullptr;
  DeviceGet device_get = nullptr;
  PrimaryCtxGetState primary_ctx_get_state = nullptr;

  static const DriverApi& Get() {
    static const DriverApi* api = [] {
      auto* a = new DriverApi;
      void* lib = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
      if (lib == nullptr) lib = ::dlopen("libcuda.so.1", RTLD_LAZY);
      if (lib != nullptr) {
        a->init = reinterpret_cast<Init>(::dlsym(lib, "cuInit"));
        a->device_get =
            reinterpret_cast<DeviceGet>(::dlsym(lib, "cuDeviceGet"));
        a->primary_ctx_get_state = reinterpret_cast<PrimaryCtxGetState>(
            ::dlsym(lib, "cuDevicePrimaryCtxGetState"));
      }
      return a;
    }();
    return *api;
  }
};

}  // namespace

absl::StatusOr<int> CudaDeviceCount() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e == cudaSuccess) return count;
  // Reset the runtime's sticky "last error" so later calls start clean.
  cudaGetLastError();
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) return 0;
  return absl::FailedPreconditionError(
      absl::StrCat("cudaGetDeviceCount: ", CudaText(e)));
}

absl::Status SetCurrentCudaDevice(int device) {
  DTRAIN_ASSIGN_OR_RETURN(const int count, CudaDeviceCount());
  if (device < 0 || device >= count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CUDA device ", device, " does not exist (", count, " visible)"));
  }
  const cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) {
    return absl::FailedPreconditionError(
        absl::StrCat("cudaSetDevice(", device, "): ", CudaText(e)));
  }
  return absl::OkStatus();
}

absl::optional<bool> HasPrimaryContext(int device) {
  const DriverApi& api = DriverApi::Get();
  if (api.init == nullptr || api.device_get == nullptr ||
      api.primary_ctx_get_state == nullptr || api.init(0) != 0) {
    return absl::nullopt;
  }
  int handle = 0;
  unsigned int flags = 0;
  int active = 0;
  if (api.device_get(&handle, device) != 0 ||
      api.primary_ctx_get_state(handle, &flags, &active) != 0) {
    return absl::nullopt;
  }
  return active != 0;
}

CudaDeviceGuard::CudaDeviceGuard(int device) : device_(device) {
  if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
  if (previous_ != device) cudaSetDevice(device);
}

CudaDeviceGuard::~CudaDeviceGuard() {
  if (previous_ < 0 || previous_ == device_) return;
  if (ShouldRestoreDevice(previous_, device_, HasPrimaryContext(previous_))) {
    cudaSetDevice(previous_);
  }
}

#endif  // DTRAIN_HAVE_NCCL

}  // namespace dtrain::base
