#include "dist/backend/collective.h"

#include <c10/core/ScalarType.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "base/tensor_text.h"
#include "dist/backend/describe.h"
#include "dist/store/prefix_store.h"

namespace dtrain::backend::internal {

std::string DescribeTensor(const at::Tensor& t) {
  if (!t.defined()) return "undefined tensor";
  return absl::StrCat(t.numel(), " x ", base::DtypeName(t.scalar_type()), " = ",
                      FormatBytes(t.numel() * t.element_size()));
}

absl::Status CheckTensor(absl::string_view backend, absl::string_view op,
                         const at::Tensor& t, bool want_cuda,
                         absl::Span<const at::ScalarType> supported) {
  const std::string where = absl::StrCat(backend, " ", op);
  if (!t.defined())
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": undefined tensor"));
  if (t.layout() != at::kStrided || t.is_quantized()) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, " needs dense (strided) tensors; got layout ",
        c10::toString(t.layout()), t.is_quantized() ? " (quantized)" : ""));
  }
  if (want_cuda != t.is_cuda()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " needs ", want_cuda ? "CUDA" : "CPU",
                     " tensors; got one on ", t.device().str()));
  }
  if (!t.is_contiguous()) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, " needs contiguous tensors; call .contiguous() first"));
  }
  for (at::ScalarType s : supported) {
    if (t.scalar_type() == s) return absl::OkStatus();
  }
  std::vector<std::string> names;
  for (at::ScalarType s : supported) names.push_back(base::DtypeName(s));
  return absl::InvalidArgumentError(absl::StrCat(
      where, " does not support dtype ", base::DtypeName(t.scalar_type()),
      " (supported: ", absl::StrJoin(names, ", "), ")"));
}

absl::Status CheckSameAs(absl::string_view backend, absl::string_view op,
                         absl::Span<const at::Tensor> tensors, size_t count,
                         const at::Tensor& like) {
  const std::string where = absl::StrCat(backend, " ", op);
  if (tensors.size() != count) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " needs one tensor per rank (", count, "), got ",
                     tensors.size()));
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor& t = tensors[i];
    if (!t.defined() || t.layout() != at::kStrided ||
        t.scalar_type() != like.scalar_type() || t.numel() != like.numel() ||
        t.device() != like.device() || !t.is_contiguous()) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": tensor ", i, " (", DescribeTensor(t),
          t.defined() ? absl::StrCat(" on ", t.device().str()) : "",
          ") must be contiguous and match ", DescribeTensor(like), " on ",
          like.device().str()));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckReduceOp(absl::string_view backend, absl::string_view op,
                           ReduceOp reduce, const at::Tensor& t) {
  if (reduce == ReduceOp::kAverage && !at::isFloatingType(t.scalar_type())) {
    return absl::InvalidArgumentError(absl::StrCat(
        backend, " ", op, ": average of ", base::DtypeName(t.scalar_type()),
        " tensors is not defined; use sum"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<store::Store>> BackendNamespace(
    std::shared_ptr<store::Store> store, absl::string_view backend, int rank) {
  absl::StatusOr<int64_t> n =
      store->Add(absl::StrCat(backend, "_instances/rank", rank), 1);
  if (!n.ok()) {
    return absl::Status(n.status().code(),
                        absl::StrCat("[rank ", rank, "] ", backend,
                                     ": numbering this backend in the store: ",
                                     n.status().message()));
  }
  return std::make_shared<store::PrefixStore>(absl::StrCat(backend, "/", *n),
                                              std::move(store));
}

std::string Describe(const Description& d, int64_t seq) {
  if (d.details.empty()) return absl::StrCat(d.op, " #", seq);
  return absl::StrCat(d.op, " #", seq, " (", d.details, ")");
}

absl::StatusOr<Description> PrepareAllReduce(
    absl::string_view backend, const TensorCheck& check,
    const at::Tensor& tensor, ReduceOp op,
    absl::Span<const absl::string_view> details) {
  DTRAIN_RETURN_IF_ERROR(check("allreduce", tensor));
  DTRAIN_RETURN_IF_ERROR(CheckReduceOp(backend, "allreduce", op, tensor));
  Description d{"allreduce",
                absl::StrCat(ReduceOpName(op), ", ", DescribeTensor(tensor))};
  for (absl::string_view x : details) {
    if (!x.empty()) absl::StrAppend(&d.details, ", ", x);
  }
  return d;
}

absl::StatusOr<Description> PrepareBroadcast(absl::string_view backend,
                                             const TensorCheck& check, int size,
                                             const at::Tensor& tensor,
                                             int root) {
  DTRAIN_RETURN_IF_ERROR(check("broadcast", tensor));
  if (root < 0 || root >= size) {
    return absl::InvalidArgumentError(absl::StrCat(
        backend, " broadcast: root ", root, " is outside [0, ", size, ")"));
  }
  return Description{"broadcast", absl::StrCat("from rank ", root, ", ",
                                               DescribeTensor(tensor))};
}

absl::StatusOr<Description> PrepareAllGather(
    absl::string_view backend, const TensorCheck& check, int size,
    absl::Span<const at::Tensor> outputs, const at::Tensor& input) {
  DTRAIN_RETURN_IF_ERROR(check("allgather", input));
  DTRAIN_RETURN_IF_ERROR(
      CheckSameAs(backend, "allgather", outputs, size, input));
  return Description{"allgather", DescribeTensor(input)};
}

absl::StatusOr<Description> PrepareReduceScatter(
    absl::string_view backend, const TensorCheck& check, int size,
    const at::Tensor& output, absl::Span<const at::Tensor> inputs,
    ReduceOp op) {
  DTRAIN_RETURN_IF_ERROR(check("reduce_scatter", output));
  DTRAIN_RETURN_IF_ERROR(
      CheckSameAs(backend, "reduce_scatter", inputs, size, output));
  DTRAIN_RETURN_IF_ERROR(CheckReduceOp(backend, "reduce_scatter", op, output));
  return Description{"reduce_scatter",
                     absl::StrCat(ReduceOpName(op), ", ",
                                  DescribeTensor(output), " per rank")};
}

bool BackToBack(absl::Span<const at::Tensor> parts) {
  if (parts.empty() || parts[0].numel() == 0) return false;
  const char* next = static_cast<const char*>(parts[0].data_ptr());
  for (const at::Tensor& t : parts) {
    if (!t.is_contiguous() || t.data_ptr() != next) return false;
    next += t.numel() * t.element_size();
  }
  return true;
}

}  // namespace dtrain::backend::internal
