// A reduce-scatter over Gloo's unbound buffers, in a ring: each rank sends
// (size - 1) / size of the data once, half of what a ring allreduce sends.
// Gloo's own reduce-scatter is an algorithm class bound to pairs, which
// leaves later unbound-buffer collectives on the same context slow
// (docs/PERFORMANCE.md); this one uses the same API as the allreduce.
//
// Not thread-safe: one collective at a time on a context (the backend's
// worker thread). Every rank calls it in the same order as the other
// collectives on the context, with the same count, element size and
// reduction.
#ifndef DTRAIN_DIST_BACKEND_GLOO_RING_REDUCE_SCATTER_H_
#define DTRAIN_DIST_BACKEND_GLOO_RING_REDUCE_SCATTER_H_

#include <cstddef>
#include <functional>
#include <memory>

#include "gloo/context.h"

namespace dtrain::backend {

// c[i] = a[i] op b[i] for i in [0, n): Gloo's element-wise reductions
// (gloo::sum<T>, ...).
using RingReduction =
    std::function<void(void* c, const void* a, const void* b, size_t n)>;

// `data` holds context->size blocks of `count` elements of `element_size`
// bytes. On return, block context->rank holds that block reduced over every
// rank (each element combined in ring order, which is the same on every run
// but not rank order); the other blocks hold partial results. Throws what
// Gloo throws (gloo::IoException) when a peer fails or the context's
// timeout passes; its buffers are then left allocated, since Gloo's device
// thread may still be signalling them.
void RingReduceScatter(const std::shared_ptr<gloo::Context>& context,
                       void* data, size_t count, size_t element_size,
                       const RingReduction& reduce);

}  // namespace dtrain::backend

#endif  // DTRAIN_DIST_BACKEND_GLOO_RING_REDUCE_SCATTER_H_
