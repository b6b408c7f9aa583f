// Argument checks and descriptions shared by the backends, so that every
// backend rejects the same inputs with the same words and describes its
// collectives the same way in errors.
#ifndef DTRAIN_DIST_BACKEND_COLLECTIVE_H_
#define DTRAIN_DIST_BACKEND_COLLECTIVE_H_

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "dist/backend/backend.h"
#include "dist/backend/describe.h"
#include "dist/store/store.h"

namespace dtrain::backend::internal {

using backend::FormatBytes;
using backend::FormatElapsed;

// "4096 x float32 = 16 KiB".
std::string DescribeTensor(const at::Tensor& t);

// The dtypes every backend (Gloo, NCCL, shared memory) reduces and carries.
inline constexpr at::ScalarType kCollectiveDtypes[] = {
    at::kFloat, at::kDouble, at::kHalf, at::kBFloat16,
    at::kInt,   at::kLong,   at::kByte, at::kChar};

// Checks a tensor given to `op` on a backend that needs `device_kind` ("CPU" or
// "CUDA") tensors: defined, on that kind of device, contiguous, and of a dtype
// in `supported`.
absl::Status CheckTensor(absl::string_view backend, absl::string_view op,
                         const at::Tensor& t, bool want_cuda,
                         absl::Span<const at::ScalarType> supported);

// Checks that each of `tensors` (expected: `count` of them) has `like`'s dtype,
// size and device.
absl::Status CheckSameAs(absl::string_view backend, absl::string_view op,
                         absl::Span<const at::Tensor> tensors, size_t count,
                         const at::Tensor& like);

// kAverage needs a floating dtype.
absl::Status CheckReduceOp(absl::string_view backend, absl::string_view op,
                           ReduceOp reduce, const at::Tensor& t);

// Validates one tensor the way a backend needs (device, dtype, size limits).
using TensorCheck =
    std::function<absl::Status(absl::string_view op, const at::Tensor& t)>;
// A validated collective, described for messages: `op` ("allreduce") and
// `details` ("sum, 4096 x float32 = 16 KiB, ring"). The backend adds the
// sequence number when it issues it.
struct Description {
  std::string op;
  std::string details;
};

// The store namespace of a new backend: "<backend>/<n>" where n counts the
// backends of that kind this rank created over `store`. Every rank creates its
// backends in the same order (as PyTorch numbers its process groups), so the
// ranks of one backend meet in one fresh namespace, and a backend re-created
// after another never reads the first one's keys.
absl::StatusOr<std::shared_ptr<store::Store>> BackendNamespace(
    std::shared_ptr<store::Store> store, absl::string_view backend, int rank);

// "allreduce #12 (sum, 4096 x float32 = 16 KiB, ring, bucket 3)".
std::string Describe(const Description& d, int64_t seq);

// Each Prepare* checks a collective's arguments for `backend` (rank count
// `size`) and describes it, or returns the argument error. `details` are
// appended when not empty.
absl::StatusOr<Description> PrepareAllReduce(
    absl::string_view backend, const TensorCheck& check,
    const at::Tensor& tensor, ReduceOp op,
    absl::Span<const absl::string_view> details);
absl::StatusOr<Description> PrepareBroadcast(absl::string_view backend,
                                             const TensorCheck& check, int size,
                                             const at::Tensor& tensor,
                                             int root);
absl::StatusOr<Description> PrepareAllGather(
    absl::string_view backend, const TensorCheck& check, int size,
    absl::Span<const at::Tensor> outputs, const at::Tensor& input);
absl::StatusOr<Description> PrepareReduceScatter(
    absl::string_view backend, const TensorCheck& check, int size,
    const at::Tensor& output, absl::Span<const at::Tensor> inputs, ReduceOp op);

// Whether `parts` (a reduce-scatter's inputs, an allgather's outputs) are
// contiguous, non-empty and back to back in order: part j starts where part
// j - 1 ends. A backend then works on them as one message, without staging
// them in a scratch buffer of its own.
bool BackToBack(absl::Span<const at::Tensor> parts);

}  // namespace dtrain::backend::internal

#endif  // DTRAIN_DIST_BACKEND_COLLECTIVE_H_
