#include "dist/backend/backend.h"

#include <ATen/ops/zeros.h>

#include <exception>

#include "absl/strings/str_cat.h"

namespace dtrain::backend {

absl::string_view ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAverage:
      return "average";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kProduct:
      return "product";
  }
  return "unknown";
}

absl::StatusOr<at::Tensor> Backend::AllocateBuffer(int64_t numel,
                                                   at::ScalarType dtype) {
  if (numel < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[rank ", rank(), "] ", name(), ": buffer of ", numel, " elements"));
  }
  try {
    return at::zeros({numel}, at::TensorOptions().dtype(dtype));
  } catch (const std::exception& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat("[rank ", rank(), "] ", name(), ": allocating ", numel,
                     " x ", c10::toString(dtype), ": ", e.what()));
  }
}

}  // namespace dtrain::backend
