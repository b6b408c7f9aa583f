// The shm backend's buffers from AllocateBuffer (shm_backend.h), each rank's
// mapped by every rank, and the zero-copy collectives' work on them: the
// request the ranks agree on before touching each other's buffers, and what
// each rank does between the two barriers that bracket such a collective.
//
// The steps keep to one rule, which makes them safe beside each other and
// beside the copying collectives: between the barriers, a part of any
// buffer is written by one rank only (its own share of every buffer for a
// reduce, its own buffer for a broadcast), and nothing a rank reads there is
// written by another until the second barrier. The backend's worker thread
// only.
#ifndef DTRAIN_DIST_BACKEND_SHM_SHARED_BUFFERS_H_
#define DTRAIN_DIST_BACKEND_SHM_SHARED_BUFFERS_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "dist/backend/shm/segment.h"

namespace dtrain::backend::shm {

constexpr int64_t AlignUp(int64_t n, int64_t to) {
  return (n + to - 1) / to * to;
}

// Every rank's mapping of one buffer from AllocateBuffer.
struct SharedBuffer {
  int64_t bytes = 0;
  std::vector<std::shared_ptr<Segment>> mappings;  // [rank] is the rank's
  std::vector<char*> data;                         // mappings[r]->data()
};

// The zero-copy collectives, each with its own mark in a request, so that
// ranks that issue different ones disagree.
enum class InPlaceKind : uint64_t {
  kAllReduce = 0x7a65726f636f7079,      // "zerocopy"
  kReduceScatter = 0x7a63736361747472,  // "zcscattr"
  kAllGather = 0x7a63676174686572,      // "zcgather"
  kBroadcast = 0x7a6362726f616463,      // "zcbroadc"
  kReduce = 0x7a63726564756365,         // "zcreduce"
};

// "allreduce", "reduce_scatter", ...
const char* InPlaceName(InPlaceKind kind);

// What a zero-copy collective works on, written into each rank's slot so that
// every rank checks the others agree before touching their buffers. For
// reduce_scatter and allgather, numel is per rank: the collective covers
// size * numel elements from offset, rank r's share at r * numel.
struct InPlaceRequest {
  InPlaceKind kind;
  int64_t buffer;  // Index among the backend's buffers.
  int64_t offset;  // Bytes into the buffer.
  int64_t numel;
  int32_t dtype;
  int32_t op;  // The ReduceOp; a broadcast's root.
};
static_assert(std::has_unique_object_representations_v<InPlaceRequest>,
              "compared with memcmp");

// The request for `parts` when they lie back to back, in order, entirely
// inside one of `rank`'s buffers (an allreduce passes one part;
// reduce_scatter and allgather one per rank); nullopt otherwise, for the
// copying path. `op` is the ReduceOp, or a broadcast's root.
std::optional<InPlaceRequest> FindInBuffer(
    absl::Span<const SharedBuffer> buffers, int rank, InPlaceKind kind,
    absl::Span<const at::Tensor> parts, int32_t op);

// Each is rank `rank` of `size`'s part of one zero-copy collective, on the
// request's buffer `b`.

// Allreduce (`to_all`) or reduce to rank 0: reduces this rank's share of the
// part (64-element aligned, the copying allreduce's shares) in rank order
// from every rank's buffer into rank 0's, block by block, each block copied
// to the other ranks' buffers while in cache when `to_all`. The copying
// allreduce's bits.
absl::Status ReduceShare(const SharedBuffer& b, const InPlaceRequest& request,
                         int rank, int size, bool to_all);

// Reduce_scatter: reduces this rank's share in rank order into rank 0's
// buffer, block by block, each copied to `output` while in cache (which may
// be the share in this rank's own buffer). Measured: reducing into a scratch
// block instead took up to twice as long (docs/PERFORMANCE.md).
absl::Status ReduceScatterShare(const SharedBuffer& b,
                                const InPlaceRequest& request, int rank,
                                int size, char* output);

// Broadcast: a rank other than the root copies the root's part into its own.
void CopyFromRoot(const SharedBuffer& b, const InPlaceRequest& request,
                  int rank);

// Allgather: copies `input` into this rank's share of every rank's buffer
// (the input may already be that share of its own buffer).
void CopyShareToAll(const SharedBuffer& b, const InPlaceRequest& request,
                    int rank, int size, const char* input);

}  // namespace dtrain::backend::shm

#endif  // DTRAIN_DIST_BACKEND_SHM_SHARED_BUFFERS_H_
