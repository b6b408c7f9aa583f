#include "dist/backend/gloo/ring_reduce_scatter.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "gloo/transport/unbound_buffer.h"

namespace dtrain::backend {
namespace {

// Each ring step moves its block in pieces of at most this many bytes, so a
// reduce-scatter needs two pieces of scratch, not a block (a sharded
// optimizer's point is memory; a block of a 25 MiB bucket at 2 ranks is
// 12.5 MiB), and the reduction of one piece overlaps the next one's arrival.
constexpr size_t kPieceBytes = size_t{1} << 20;

// What one reduce-scatter hands Gloo's transport.
struct RingBuffers {
  std::vector<char> received[2];  // pieces from the left neighbour, in turn
  std::unique_ptr<gloo::transport::UnboundBuffer> data;
  std::unique_ptr<gloo::transport::UnboundBuffer> inbox[2];
};

}  // namespace

void RingReduceScatter(const std::shared_ptr<gloo::Context>& context,
                       void* data, size_t count, size_t element_size,
                       const RingReduction& reduce) {
  const int size = context->size;
  const int rank = context->rank;
  if (size == 1 || count == 0) return;
  const size_t block = count * element_size;
  const size_t piece = std::min(
      block, std::max<size_t>(1, kPieceBytes / element_size) * element_size);
  const size_t pieces = (block + piece - 1) / piece;
  auto length = [&](size_t k) { return std::min(piece, block - k * piece); };
  auto buffers = std::make_unique<RingBuffers>();
  buffers->data = context->createUnboundBuffer(data, block * size);
  for (int i = 0; i < 2; ++i) {
    buffers->received[i].resize(piece);
    buffers->inbox[i] =
        context->createUnboundBuffer(buffers->received[i].data(), piece);
  }
  const int right = (rank + 1) % size;
  const int left = (rank + size - 1) % size;
  const uint64_t slot = context->nextSlot();
  const auto timeout = context->getTimeout();
  char* const bytes = static_cast<char*>(data);
  try {
    // At step s a rank sends block rank - s - 1 (its own input at s = 0,
    // then the partial result it has just reduced) and reduces block
    // rank - s - 2, arriving from the left, into its copy. Block b leaves
    // rank b + 1 and gains one rank per step: after size - 1 steps it
    // reaches rank b, reduced over all. Messages between two ranks on one
    // slot arrive in the order sent, so the pieces need no tags.
    for (int s = 0; s < size - 1; ++s) {
      const int send = (rank - s - 1 + 2 * size) % size;
      const int receive = (rank - s - 2 + 2 * size) % size;
      for (size_t k = 0; k < pieces; ++k) {
        buffers->data->send(right, slot, send * block + k * piece, length(k));
      }
      buffers->inbox[0]->recv(left, slot, 0, length(0));
      for (size_t k = 0; k < pieces; ++k) {
        if (k + 1 < pieces) {
          buffers->inbox[(k + 1) % 2]->recv(left, slot, 0, length(k + 1));
        }
        buffers->inbox[k % 2]->waitRecv(timeout);
        char* into = bytes + receive * block + k * piece;
        reduce(into, into, buffers->received[k % 2].data(),
               length(k) / element_size);
      }
      for (size_t k = 0; k < pieces; ++k) buffers->data->waitSend(timeout);
    }
  } catch (...) {
    (void)buffers.release();
    throw;
  }
}

}  // namespace dtrain::backend
