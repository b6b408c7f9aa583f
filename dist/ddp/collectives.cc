#include "dist/ddp/collectives.h"

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "dist/backend/describe.h"

namespace dtrain::ddp::internal {

std::string ErrorPrefix(int rank) {
  return absl::StrCat("[rank ", rank, "] ddp: ");
}

Collectives::Collectives(backend::Backend& backend, absl::Duration timeout)
    : backend_(backend),
      timeout_(timeout),
      prefix_(ErrorPrefix(backend.rank())),
      torch_prefix_(absl::StrCat(prefix_, "LibTorch: ")) {}

absl::Status Collectives::Wait(backend::Work& work, absl::string_view what,
                               absl::Time started) const {
  return Described(work, work.Wait(timeout_), what, started);
}

absl::Status Collectives::WaitForResult(backend::Work& work,
                                        absl::string_view what,
                                        absl::Time started) const {
  return Described(work, work.WaitForResult(timeout_), what, started);
}

absl::Status Collectives::Described(backend::Work& work, const absl::Status& s,
                                    absl::string_view what,
                                    absl::Time started) const {
  if (s.ok()) return s;
  const std::string elapsed = backend::FormatElapsed(absl::Now() - started);
  if (!work.IsCompleted()) {
    return absl::DeadlineExceededError(absl::StrCat(
        prefix_, what, " did not finish within ", elapsed,
        " (DdpOptions::timeout); the backend is still running it"));
  }
  return absl::Status(s.code(), absl::StrCat(prefix_, what, " failed after ",
                                             elapsed, ": ", s.message()));
}

std::shared_ptr<backend::Work> Collectives::GatherBySum(
    const at::Tensor& mine, at::Device device, at::Tensor* rows,
    absl::string_view label) const {
  *rows =
      at::zeros({backend_.size(), mine.numel()}, mine.options().device(device));
  rows->select(0, backend_.rank()).copy_(mine.reshape(-1));
  return backend_.AllReduce(*rows, backend::ReduceOp::kSum, label);
}

}  // namespace dtrain::ddp::internal
