// Throughput of the LibTorch kernels that dominate a training step, with one
// intra-op thread: matrix multiply (tells which BLAS LibTorch runs on: the
// reference BLAS is several times slower than OpenBLAS, which keeps its own
// thread pool unless OPENBLAS_NUM_THREADS=1) and the ConvNet's first
// convolution.

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include "benchmark/benchmark.h"

namespace {

void BM_MatMul(benchmark::State& state) {
  at::set_num_threads(1);
  const int64_t n = state.range(0);
  torch::Tensor a = torch::randn({n, n});
  torch::Tensor b = torch::randn({n, n});
  for (auto _ : state) {
    torch::Tensor c = torch::mm(a, b);
    benchmark::DoNotOptimize(c.data_ptr());
  }
  state.counters["FLOP/s"] = benchmark::Counter(
      2.0 * n * n * n, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_MatMul)->RangeMultiplier(4)->Range(64, 1024);

// The ConvNet's first layer: 1->16 channels, 3x3, on 28x28 images.
void BM_Conv2dForwardBackward(benchmark::State& state) {
  at::set_num_threads(1);
  const int64_t batch = state.range(0);
  torch::nn::Conv2d conv(torch::nn::Conv2dOptions(1, 16, 3));
  torch::Tensor input = torch::randn({batch, 1, 28, 28});
  for (auto _ : state) {
    conv->zero_grad();
    conv->forward(input).sum().backward();
  }
  state.SetItemsProcessed(state.iterations() * batch);
}
BENCHMARK(BM_Conv2dForwardBackward)->Arg(32)->Arg(128);

}  // namespace
