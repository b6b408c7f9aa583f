#include "dist/backend/gloo/ring_reduce_scatter.h"

#include <memory>
#include <vector>

#include "gloo/transport/unbound_buffer.h"

namespace dtrain::backend {
namespace {

// What one reduce-scatter hands Gloo's transport.
struct RingBuffers {
  std::vector<char> received;  // one block from the left neighbour
  std::unique_ptr<gloo::transport::UnboundBuffer> data;
  std::unique_ptr<gloo::transport::UnboundBuffer> inbox;
};

}  // namespace

void RingReduceScatter(const std::shared_ptr<gloo::Context>& context,
                       void* data, size_t count, size_t element_size,
                       const RingReduction& reduce) {
  const int size = context->size;
  const int rank = context->rank;
  if (size == 1 || count == 0) return;
  const size_t block = count * element_size;
  auto buffers = std::make_unique<RingBuffers>();
  buffers->received.resize(block);
  buffers->data = context->createUnboundBuffer(data, block * size);
  buffers->inbox =
      context->createUnboundBuffer(buffers->received.data(), block);
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
    // reaches rank b, reduced over all.
    for (int s = 0; s < size - 1; ++s) {
      const int send = (rank - s - 1 + 2 * size) % size;
      const int receive = (rank - s - 2 + 2 * size) % size;
      buffers->inbox->recv(left, slot, 0, block);
      buffers->data->send(right, slot, send * block, block);
      buffers->inbox->waitRecv(timeout);
      char* into = bytes + receive * block;
      reduce(into, into, buffers->received.data(), count);
      buffers->data->waitSend(timeout);
    }
  } catch (...) {
    (void)buffers.release();
    throw;
  }
}

}  // namespace dtrain::backend
