#include "trainer/rank_sync.h"

#include <ATen/Functions.h>
#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/fnv1a.h"
#include "base/name_list.h"
#include "base/status_macros.h"

namespace dtrain::trainer {
absl::StatusOr<std::vector<double>> AllReduceValues(
    backend::Backend& backend, const std::vector<double>& values,
    backend::ReduceOp op, c10::Device device, absl::Duration timeout) {
  at::Tensor t = at::tensor(values, at::TensorOptions().dtype(at::kDouble));
  if (!device.is_cpu()) t = t.to(device);
  DTRAIN_RETURN_IF_ERROR(backend.AllReduce(t, op)->WaitForResult(timeout));
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
  DTRAIN_RETURN_IF_ERROR(backend.Broadcast(size, root)->WaitForResult(timeout));
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
    DTRAIN_RETURN_IF_ERROR(
        backend.Broadcast(data, root)->WaitForResult(timeout));
  }
  if (!is_root) {
    data = data.cpu();
    bytes->assign(reinterpret_cast<const char*>(data.data_ptr<uint8_t>()),
                  static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

namespace {

// FNV-1a over the tensor's bytes, on the CPU: exact, whatever the device.
int64_t BytesFingerprint(const at::Tensor& t) {
  const at::Tensor c = t.detach().to(at::kCPU).contiguous();
  const size_t n = static_cast<size_t>(c.numel()) * c.element_size();
  base::Fnv1a h;
  h.Update(c.data_ptr(), n);
  const uint64_t digest = h.digest();
  int64_t out;
  std::memcpy(&out, &digest, sizeof(out));
  return out;
}

}  // namespace

absl::Status CheckIdenticalAcrossRanks(
    backend::Backend& backend,
    const std::vector<std::pair<std::string, at::Tensor>>& tensors,
    c10::Device device, absl::Duration timeout) {
  const int64_t n = static_cast<int64_t>(tensors.size());
  if (n == 0) return absl::OkStatus();
  at::Tensor mine = at::empty({n}, at::TensorOptions().dtype(at::kLong));
  for (int64_t i = 0; i < n; ++i) {
    mine[i] = BytesFingerprint(tensors[static_cast<size_t>(i)].second);
  }
  at::Tensor high = mine.to(device, /*non_blocking=*/false, /*copy=*/true);
  at::Tensor low = mine.to(device, /*non_blocking=*/false, /*copy=*/true);
  DTRAIN_RETURN_IF_ERROR(
      backend.AllReduce(high, backend::ReduceOp::kMax)->WaitForResult(timeout));
  DTRAIN_RETURN_IF_ERROR(
      backend.AllReduce(low, backend::ReduceOp::kMin)->WaitForResult(timeout));
  high = high.cpu();
  low = low.cpu();
  std::vector<std::string> differ;
  for (int64_t i = 0; i < n; ++i) {
    if (high[i].item<int64_t>() != low[i].item<int64_t>()) {
      differ.push_back(tensors[static_cast<size_t>(i)].first);
    }
  }
  if (differ.empty()) return absl::OkStatus();
  const std::string names = base::JoinFirst(differ, 5);
  return absl::InternalError(absl::StrCat(
      "[rank ", backend.rank(), "] ", differ.size(), " of ", n,
      " parameters differ between the ranks: ", names,
      "; DDP keeps them identical, so a rank diverged (a nondeterministic "
      "kernel, or a bug)"));
}

}  // namespace dtrain::trainer
