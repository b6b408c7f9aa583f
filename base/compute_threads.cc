#include "base/compute_threads.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>

namespace dtrain::base {

ComputeThreads SetComputeThreads(int n) {
  at::set_num_threads(n);
  ComputeThreads out;
  out.intra_op = at::get_num_threads();
  // Looked up at run time: OpenBLAS is LibTorch's choice, not a dependency.
  using SetThreads = void (*)(int);
  using GetThreads = int (*)();
  auto set = reinterpret_cast<SetThreads>(
      dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  auto get = reinterpret_cast<GetThreads>(
      dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  if (set != nullptr && get != nullptr) {
    set(n);
    out.blas = get();
  }
  return out;
}

}  // namespace dtrain::base
