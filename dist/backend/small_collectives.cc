#include "dist/backend/small_collectives.h"

#include <ATen/Functions.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/fnv1a.h"
#include "base/name_list.h"
#include "base/status_macros.h"
#include "dist/backend/describe.h"

namespace dtrain::backend {
namespace {

// FNV-1a over the tensor's bytes, on the CPU: exact, whatever the device.
int64_t BytesFingerprint(const at::Tensor& t) {
  const at::Tensor c = t.detach().to(at::kCPU).contiguous();
  base::Fnv1a h;
  h.Update(c.data_ptr(), static_cast<size_t>(c.numel()) * c.element_size());
  const uint64_t digest = h.digest();
  int64_t out;
  std::memcpy(&out, &digest, sizeof(out));
  return out;
}

at::Tensor BytesTensor(absl::string_view bytes) {
  at::Tensor t = at::empty({static_cast<int64_t>(bytes.size())},
                           at::TensorOptions().dtype(at::kByte));
  if (!bytes.empty())
    std::memcpy(t.data_ptr<uint8_t>(), bytes.data(), bytes.size());
  return t;
}

std::string TensorBytes(const at::Tensor& t) {
  const at::Tensor c = t.cpu();
  return std::string(reinterpret_cast<const char*>(c.data_ptr<uint8_t>()),
                     static_cast<size_t>(c.numel()));
}

}  // namespace

SmallCollectives::SmallCollectives(Backend& backend, c10::Device device,
                                   absl::Duration timeout,
                                   std::string error_prefix,
                                   std::string timeout_name)
    : backend_(&backend),
      device_(device),
      timeout_(timeout),
      prefix_(std::move(error_prefix)),
      torch_prefix_(absl::StrCat(prefix_, "LibTorch: ")),
      timeout_name_(std::move(timeout_name)) {}

absl::Status SmallCollectives::Wait(Work& work, absl::string_view what,
                                    absl::Time started) const {
  return Described(work, work.Wait(timeout_), what, started);
}

absl::Status SmallCollectives::WaitForResult(Work& work, absl::string_view what,
                                             absl::Time started) const {
  return Described(work, work.WaitForResult(timeout_), what, started);
}

absl::Status SmallCollectives::Described(Work& work, const absl::Status& s,
                                         absl::string_view what,
                                         absl::Time started) const {
  if (s.ok()) return s;
  const std::string elapsed = FormatElapsed(absl::Now() - started);
  if (!work.IsCompleted()) {
    // The wait's own words come too: a stall report (who has not joined,
    // what they last did) rides on them.
    return absl::DeadlineExceededError(
        absl::StrCat(prefix_, what, " did not finish within ", elapsed, " (",
                     timeout_name_, "); the backend is still running it",
                     s.message().empty() ? "" : ": ", s.message()));
  }
  return absl::Status(s.code(), absl::StrCat(prefix_, what, " failed after ",
                                             elapsed, ": ", s.message()));
}

std::shared_ptr<Work> SmallCollectives::GatherBySum(
    const at::Tensor& mine, at::Device device, at::Tensor* rows,
    absl::string_view label) const {
  *rows = at::zeros({backend_->size(), mine.numel()},
                    mine.options().device(device));
  rows->select(0, backend_->rank()).copy_(mine.reshape(-1));
  return backend_->AllReduce(*rows, ReduceOp::kSum, label);
}

at::Tensor SmallCollectives::OnDevice(const at::Tensor& t) const {
  return device_.is_cpu() ? t : t.to(device_);
}

absl::StatusOr<std::vector<double>> SmallCollectives::AllReduce(
    const std::vector<double>& values, ReduceOp op) const {
  at::Tensor t =
      OnDevice(at::tensor(values, at::TensorOptions().dtype(at::kDouble)));
  DTRAIN_RETURN_IF_ERROR(backend_->AllReduce(t, op)->WaitForResult(timeout_));
  t = t.cpu();
  const double* p = t.data_ptr<double>();
  return std::vector<double>(p, p + values.size());
}

absl::Status SmallCollectives::Broadcast(int root, std::string* bytes,
                                         const absl::Status& error) const {
  const bool is_root = rank() == root;
  // {size, status code, message size}; size -1: the root sends its error.
  std::vector<int64_t> header = {0, 0, 0};
  if (is_root) {
    header = {error.ok() ? static_cast<int64_t>(bytes->size()) : -1,
              static_cast<int64_t>(error.code()),
              static_cast<int64_t>(error.message().size())};
  }
  at::Tensor head =
      OnDevice(at::tensor(header, at::TensorOptions().dtype(at::kLong)));
  DTRAIN_RETURN_IF_ERROR(
      backend_->Broadcast(head, root)->WaitForResult(timeout_));
  head = head.cpu();
  const int64_t n = head[0].item<int64_t>();
  const int64_t payload = n >= 0 ? n : head[2].item<int64_t>();
  at::Tensor data = OnDevice(
      is_root
          ? BytesTensor(n >= 0 ? absl::string_view(*bytes) : error.message())
          : at::empty({payload}, at::TensorOptions().dtype(at::kByte)));
  if (payload > 0) {
    DTRAIN_RETURN_IF_ERROR(
        backend_->Broadcast(data, root)->WaitForResult(timeout_));
  }
  if (n < 0) {
    if (is_root) return error;
    return absl::Status(static_cast<absl::StatusCode>(head[1].item<int64_t>()),
                        absl::StrCat("rank ", root, ": ", TensorBytes(data)));
  }
  if (!is_root) *bytes = TensorBytes(data);
  return absl::OkStatus();
}

absl::Status SmallCollectives::CheckIdentical(
    const std::vector<std::pair<std::string, at::Tensor>>& tensors) const {
  const int64_t n = static_cast<int64_t>(tensors.size());
  if (n == 0) return absl::OkStatus();
  at::Tensor mine = at::empty({n}, at::TensorOptions().dtype(at::kLong));
  for (int64_t i = 0; i < n; ++i) {
    mine[i] = BytesFingerprint(tensors[static_cast<size_t>(i)].second);
  }
  at::Tensor high = mine.to(device_, /*non_blocking=*/false, /*copy=*/true);
  at::Tensor low = mine.to(device_, /*non_blocking=*/false, /*copy=*/true);
  DTRAIN_RETURN_IF_ERROR(
      backend_->AllReduce(high, ReduceOp::kMax)->WaitForResult(timeout_));
  DTRAIN_RETURN_IF_ERROR(
      backend_->AllReduce(low, ReduceOp::kMin)->WaitForResult(timeout_));
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
      "[rank ", rank(), "] ", differ.size(), " of ", n,
      " parameters differ between the ranks: ", names,
      "; DDP keeps them identical, so a rank diverged (a nondeterministic "
      "kernel, or a bug)"));
}

}  // namespace dtrain::backend
