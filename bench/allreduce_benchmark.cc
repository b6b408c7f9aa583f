// Allreduce latency and bandwidth, our Gloo backend against raw Gloo with the
// same algorithm, ranks as threads of this process over loopback TCP (Google
// Benchmark's ->Threads(n): thread i is rank i). Reports algbw = bytes / time
// and busbw = algbw * 2(n-1)/n, as nccl-tests define them. Targets (issue:
// backends): at >= 1 MiB ours within 5% of raw Gloo; at 4 B at most 10 us
// added.
//
//   bazel run //bench:allreduce_benchmark -- --benchmark_filter=w2
//   bazel run //bench:allreduce_benchmark -- --benchmark_counters_tabular=true

#include <ATen/ATen.h>

#include <atomic>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "bench/bench_util.h"
#include "benchmark/benchmark.h"
#include "dist/backend/gloo/gloo_backend.h"
#include "dist/backend/gloo/gloo_store.h"
#include "gloo/allreduce.h"
#include "gloo/allreduce_halving_doubling.h"
#include "gloo/rendezvous/context.h"
#include "gloo/transport/tcp/device.h"
#include "third_party/gloo_compat.h"

namespace dtrain::backend {
namespace {

GlooAlgorithm AlgorithmArg(int64_t arg) {
  return arg == 0 ? GlooAlgorithm::kRing : GlooAlgorithm::kHalvingDoubling;
}

void ReportBandwidth(benchmark::State& state, int64_t bytes) {
  const double n = state.threads();
  state.counters["algbw_GBps"] =
      benchmark::Counter(static_cast<double>(bytes) * 1e-9,
                         benchmark::Counter::kIsIterationInvariantRate |
                             benchmark::Counter::kAvgThreads);
  state.counters["busbw_GBps"] =
      benchmark::Counter(static_cast<double>(bytes) * 1e-9 * 2 * (n - 1) / n,
                         benchmark::Counter::kIsIterationInvariantRate |
                             benchmark::Counter::kAvgThreads);
  state.SetLabel(std::string(GlooAlgorithmName(AlgorithmArg(state.range(1)))));
}

void BM_OurGlooAllReduce(benchmark::State& state) {
  const int64_t bytes = state.range(0);
  Membership group;
  group.rank = state.thread_index();
  group.world_size = state.threads();
  group.store = bench::RunStore(state);
  GlooBackendOptions o;
  o.hostname = "127.0.0.1";
  o.algorithm = AlgorithmArg(state.range(1));
  auto backend = CreateGlooBackend(group, o);
  if (!backend.ok()) {
    state.SkipWithError(std::string(backend.status().message()).c_str());
    return;
  }
  at::Tensor t = at::ones({std::max<int64_t>(bytes / 4, 1)}, at::kFloat);
  // DDP broadcasts parameters before training: allreduce must stay fast after
  // other collectives.
  if (!(*backend)->Broadcast(at::ones({1 << 18}), 0)->Wait().ok() ||
      !(*backend)->Barrier()->Wait().ok()) {
    state.SkipWithError("broadcast before the measured allreduces failed");
    return;
  }
  for (auto _ : state) {
    absl::Status s = (*backend)->AllReduce(t)->Wait();
    if (!s.ok()) {
      state.SkipWithError(std::string(s.message()).c_str());
      break;
    }
  }
  ReportBandwidth(state, bytes);
}

// Raw Gloo at its best, with the same algorithm as ours: the unbound-buffer
// ring, or the halving-doubling algorithm object built once and run repeatedly.
void BM_RawGlooAllReduce(benchmark::State& state) {
  const int64_t bytes = state.range(0);
  const int count = static_cast<int>(std::max<int64_t>(bytes / 4, 1));
  auto context = std::make_shared<gloo::rendezvous::Context>(
      state.thread_index(), state.threads());
  auto store = std::make_shared<GlooStore>(bench::RunStore(state));
  auto device = gloo::transport::tcp::CreateDevice(
      gloo::transport::tcp::attr("127.0.0.1"));
  gloo_compat::ConnectFullMesh(*context, store, device);
  at::Tensor t = at::ones({count}, at::kFloat);
  if (AlgorithmArg(state.range(1)) == GlooAlgorithm::kRing) {
    for (auto _ : state) {
      gloo::AllreduceOptions opts(context);
      opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      opts.setOutput(t.data_ptr<float>(), static_cast<size_t>(count));
      opts.setReduceFunction(
          static_cast<void (*)(void*, const void*, const void*, size_t)>(
              &gloo::sum<float>));
      gloo::allreduce(opts);
    }
  } else {
    gloo::AllreduceHalvingDoubling<float> algorithm(
        context, {t.data_ptr<float>()}, count);
    for (auto _ : state) algorithm.run();
  }
  ReportBandwidth(state, bytes);
}

void Sizes(benchmark::internal::Benchmark* b) {
  for (int64_t algorithm : {0, 1}) {
    for (int64_t bytes = 4; bytes <= (int64_t{64} << 20); bytes *= 16)
      b->Args({bytes, algorithm});
  }
  b->ArgNames({"bytes", "alg"})
      ->Threads(2)
      ->Threads(4)
      ->UseRealTime()
      ->MinTime(0.2);
}

BENCHMARK(BM_OurGlooAllReduce)->Apply(Sizes);
BENCHMARK(BM_RawGlooAllReduce)->Apply(Sizes);

}  // namespace
}  // namespace dtrain::backend
