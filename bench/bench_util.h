// Helpers shared by the benchmark suites: one compute thread (LibTorch's and
// OpenBLAS's), a main() that records the thread settings, and a fresh store per
// run for suites whose threads are ranks.
#ifndef DTRAIN_BENCH_BENCH_UTIL_H_
#define DTRAIN_BENCH_BENCH_UTIL_H_

#include <memory>

#include "benchmark/benchmark.h"
#include "dist/store/store.h"

namespace dtrain::bench {

// Limits LibTorch's intra-op pool and OpenBLAS's own pool (which
// at::set_num_threads does not reach) to one thread. Returns OpenBLAS's thread
// count afterwards, or -1 without OpenBLAS.
int UseOneThread();

// Runs the registered benchmarks on one compute thread, recording the thread
// settings in the report's context. Use as a benchmark binary's main().
int RunOnOneThread(int argc, char** argv);

// A fresh in-memory store for each run of a benchmark function, shared by that
// run's threads (Google Benchmark starts new threads for every run, and runs
// one after another).
std::shared_ptr<store::Store> RunStore(benchmark::State& state);

}  // namespace dtrain::bench

#endif  // DTRAIN_BENCH_BENCH_UTIL_H_
