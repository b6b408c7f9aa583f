// How many threads one process computes with. LibTorch's intra-op pool is
// set by at::set_num_threads, but Debian's LibTorch multiplies matrices with
// OpenBLAS, whose own pool that call does not reach: its idle workers spin
// (sched_yield) on every core, which slows several ranks sharing few cores.
// SetComputeThreads sets both.
#ifndef DTRAIN_BASE_COMPUTE_THREADS_H_
#define DTRAIN_BASE_COMPUTE_THREADS_H_

namespace dtrain::base {

struct ComputeThreads {
  int intra_op = 0;
  // OpenBLAS's threads after the call; -1 when the BLAS is not OpenBLAS.
  int blas = -1;
};

// Sets LibTorch's intra-op threads and OpenBLAS's (when loaded) to `n` >= 1.
// Process-wide; call before the first computation. OpenBLAS starts its pool
// when loaded, so OPENBLAS_NUM_THREADS in the environment (the launcher sets
// it) is still a little faster than this call alone.
ComputeThreads SetComputeThreads(int n);

}  // namespace dtrain::base

#endif  // DTRAIN_BASE_COMPUTE_THREADS_H_
