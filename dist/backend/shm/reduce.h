// The arithmetic of the shared-memory collectives: combining the ranks'
// copies of a range of elements in rank order, so that every rank gets
// bit-identical results for any message size and chunking (each element's
// result depends only on that element's values, combined in the same order).
// float16 and bfloat16 are accumulated in float32, as NCCL and PyTorch do.
#ifndef DTRAIN_DIST_BACKEND_SHM_REDUCE_H_
#define DTRAIN_DIST_BACKEND_SHM_REDUCE_H_

#include <c10/core/ScalarType.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "dist/backend/backend.h"

namespace dtrain::backend::shm {

// result[i] = op(inputs[0][i], inputs[1][i], ...) for i in [begin, end),
// combined left to right; kAverage divides the sum by inputs.size() (floating
// dtypes only). `result` may be inputs[0] (a later input would be overwritten
// before it is read). kInvalidArgument for a
// dtype or op this does not handle.
absl::Status ReduceInOrder(at::ScalarType dtype, ReduceOp op,
                           absl::Span<const void* const> inputs, int64_t begin,
                           int64_t end, void* result);

}  // namespace dtrain::backend::shm

#endif  // DTRAIN_DIST_BACKEND_SHM_REDUCE_H_
