#include "dist/backend/shm/shared_buffers.h"

#include <c10/core/ScalarType.h>

#include <algorithm>
#include <cstring>

#include "base/status_macros.h"
#include "dist/backend/backend.h"
#include "dist/backend/collective.h"
#include "dist/backend/shm/reduce.h"

namespace dtrain::backend::shm {
namespace {

// Reductions go in blocks of this many bytes, each copied on while in cache.
constexpr int64_t kBlockBytes = int64_t{64} << 10;

}  // namespace

const char* InPlaceName(InPlaceKind kind) {
  switch (kind) {
    case InPlaceKind::kAllReduce:
      return "allreduce";
    case InPlaceKind::kReduceScatter:
      return "reduce_scatter";
    case InPlaceKind::kAllGather:
      return "allgather";
    case InPlaceKind::kBroadcast:
      return "broadcast";
    case InPlaceKind::kReduce:
      return "reduce";
  }
  return "?";
}

std::optional<InPlaceRequest> FindInBuffer(
    absl::Span<const SharedBuffer> buffers, int rank, InPlaceKind kind,
    absl::Span<const at::Tensor> parts, int32_t op) {
  if (!internal::BackToBack(parts)) return std::nullopt;
  const int64_t numel = parts[0].numel();
  const auto begin = reinterpret_cast<uintptr_t>(parts[0].data_ptr());
  const auto end = begin + parts.size() * numel * parts[0].element_size();
  for (size_t i = 0; i < buffers.size(); ++i) {
    const auto base = reinterpret_cast<uintptr_t>(buffers[i].data[rank]);
    if (begin >= base && end <= base + buffers[i].bytes) {
      return InPlaceRequest{kind,
                            static_cast<int64_t>(i),
                            static_cast<int64_t>(begin - base),
                            numel,
                            static_cast<int32_t>(parts[0].scalar_type()),
                            op};
    }
  }
  return std::nullopt;
}

absl::Status ReduceShare(const SharedBuffer& b, const InPlaceRequest& request,
                         int rank, int size, bool to_all) {
  const auto dtype = static_cast<at::ScalarType>(request.dtype);
  const auto op = static_cast<ReduceOp>(request.op);
  const int64_t element = c10::elementSize(dtype);
  std::vector<const void*> inputs;
  for (int r = 0; r < size; ++r) inputs.push_back(b.data[r] + request.offset);
  char* const first = b.data[0] + request.offset;
  const int64_t total = request.numel;
  const int64_t share = AlignUp((total + size - 1) / size, 64);
  const int64_t begin = std::min(total, rank * share);
  const int64_t end = std::min(total, begin + share);
  const int64_t block = kBlockBytes / element;  // 64-element multiple
  for (int64_t lo = begin; lo < end; lo += block) {
    const int64_t hi = std::min(end, lo + block);
    // Into rank 0's buffer (the result may alias the first input).
    DTRAIN_RETURN_IF_ERROR(ReduceInOrder(dtype, op, inputs, lo, hi, first));
    for (int r = 1; r < size && to_all; ++r) {
      std::memcpy(b.data[r] + request.offset + lo * element,
                  first + lo * element, (hi - lo) * element);
    }
  }
  return absl::OkStatus();
}

absl::Status ReduceScatterShare(const SharedBuffer& b,
                                const InPlaceRequest& request, int rank,
                                int size, char* output) {
  const auto dtype = static_cast<at::ScalarType>(request.dtype);
  const auto op = static_cast<ReduceOp>(request.op);
  const int64_t element = c10::elementSize(dtype);
  const int64_t share = request.offset + rank * request.numel * element;
  std::vector<const void*> inputs;
  for (int r = 0; r < size; ++r) inputs.push_back(b.data[r] + share);
  char* const first = b.data[0] + share;
  const int64_t block = kBlockBytes / element;
  for (int64_t lo = 0; lo < request.numel; lo += block) {
    const int64_t hi = std::min(request.numel, lo + block);
    DTRAIN_RETURN_IF_ERROR(ReduceInOrder(dtype, op, inputs, lo, hi, first));
    if (output != first) {
      std::memcpy(output + lo * element, first + lo * element,
                  (hi - lo) * element);
    }
  }
  return absl::OkStatus();
}

void CopyFromRoot(const SharedBuffer& b, const InPlaceRequest& request,
                  int rank) {
  const int root = request.op;
  if (rank == root) return;
  std::memcpy(b.data[rank] + request.offset, b.data[root] + request.offset,
              request.numel *
                  c10::elementSize(static_cast<at::ScalarType>(request.dtype)));
}

void CopyShareToAll(const SharedBuffer& b, const InPlaceRequest& request,
                    int rank, int size, const char* input) {
  const int64_t bytes =
      request.numel *
      c10::elementSize(static_cast<at::ScalarType>(request.dtype));
  for (int r = 0; r < size; ++r) {
    char* share = b.data[r] + request.offset + rank * bytes;
    if (share != input) std::memcpy(share, input, bytes);
  }
}

}  // namespace dtrain::backend::shm
