#include "bench/bench_util.h"

#include <ATen/Parallel.h>

#include <cstdlib>
#include <mutex>
#include <string>

#include "base/compute_threads.h"
#include "dist/store/hash_store.h"

namespace dtrain::bench {

int UseOneThread() { return base::SetComputeThreads(1).blas; }

int RunOnOneThread(int argc, char** argv) {
  const int blas_threads = UseOneThread();
  benchmark::AddCustomContext("intra_op_threads",
                              std::to_string(at::get_num_threads()));
  benchmark::AddCustomContext("blas_threads",
                              blas_threads < 0 ? std::string("not OpenBLAS")
                                               : std::to_string(blas_threads));
  const char* openblas_env = std::getenv("OPENBLAS_NUM_THREADS");
  benchmark::AddCustomContext("OPENBLAS_NUM_THREADS",
                              openblas_env ? openblas_env : "unset");
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

std::shared_ptr<store::Store> RunStore(benchmark::State& state) {
  static std::mutex mu;
  static int arrived = 0;
  static std::shared_ptr<store::Store>* current = nullptr;
  std::lock_guard<std::mutex> lock(mu);
  if (arrived == 0) {
    delete current;
    current = new std::shared_ptr<store::Store>(
        std::make_shared<store::HashStore>(absl::Seconds(60)));
  }
  std::shared_ptr<store::Store> store = *current;
  if (++arrived == state.threads()) arrived = 0;
  return store;
}

}  // namespace dtrain::bench
