#include "trainer/rank_sync.h"

#include <ATen/Functions.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace dtrain::trainer {
absl::StatusOr<std::vector<double>> AllReduceValues(
    backend::Backend& backend, const std::vector<double>& values,
    backend::ReduceOp op, c10::Device device, absl::Duration timeout) {
  at::Tensor t = at::tensor(values, at::TensorOptions().dtype(at::kDouble));
  if (!device.is_cpu()) t = t.to(device);
  DTRAIN_RETURN_IF_ERROR(backend.AllReduce(t, op)->Wait(timeout));
  t = t.cpu();
  const double* p = t.data_ptr<double>();
  return std::vector<double>(p, p + values.size());
}

absl::Status BroadcastBytes(backend::Backend& backend, int root,
                            std::string* bytes, const absl::Status& error,
                            c10::Device device, absl::Duration timeout) {
  const bool is_root = backend.rank() == root;
  // -1 says the root has nothing to send.
  at::Tensor size = at::full(
      {1},
      is_root ? (error.ok() ? static_cast<int64_t>(bytes->size()) : -1) : 0,
      at::TensorOptions().dtype(at::kLong));
  if (!device.is_cpu()) size = size.to(device);
  DTRAIN_RETURN_IF_ERROR(backend.Broadcast(size, root)->Wait(timeout));
  const int64_t n = size.cpu().item<int64_t>();
  if (n < 0) {
    if (is_root) return error;
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", root, " has nothing to send (see its log)"));
  }
  at::Tensor data = at::empty({n}, at::TensorOptions().dtype(at::kByte));
  if (is_root && n > 0) std::memcpy(data.data_ptr<uint8_t>(), bytes->data(), n);
  if (!device.is_cpu()) data = data.to(device);
  if (n > 0) {
    DTRAIN_RETURN_IF_ERROR(backend.Broadcast(data, root)->Wait(timeout));
  }
  if (!is_root) {
    data = data.cpu();
    bytes->assign(reinterpret_cast<const char*>(data.data_ptr<uint8_t>()),
                  static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

}  // namespace dtrain::trainer
