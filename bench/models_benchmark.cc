// Forward+backward time per batch of the project's models on CPU with one
// thread: the compute side of a training step, for telling compute from
// communication in the distributed benchmarks. Each iteration is one training
// step without the optimizer (zero_grad, forward in train mode, loss,
// backward); the optimizer step is measured apart (BM_AdadeltaStep).
//
//   OPENBLAS_NUM_THREADS=1 bazel run //bench:models_benchmark --
//       --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
//   (one command line; --benchmark_filter=ConvNet for a quick run)
//
// Threads: at::set_num_threads(1) covers LibTorch's own kernels and oneDNN's
// convolutions (OpenMP). OpenBLAS, which runs the linear layers, keeps its
// own thread pool that LibTorch does not reach. Set OPENBLAS_NUM_THREADS=1 in
// the environment for numbers to report: OpenBLAS then starts no workers.
// Without it the benchmark still limits OpenBLAS to one thread through
// openblas_set_num_threads, but the idle workers stay, and the ConvNet step
// measured 5-10% slower that way in an interleaved comparison here. The
// context lines "blas_threads" and "OPENBLAS_NUM_THREADS" say how a run was
// made.
//
// Times are wall-clock (UseRealTime), so threads a library starts anyway
// cannot hide work from the measurement.

#include <ATen/Parallel.h>
#include <torch/nn/functional/loss.h>
#include <torch/utils.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "benchmark/benchmark.h"
#include "models/convnet.h"
#include "models/model.h"
#include "models/resnet.h"
#include "optim/adadelta.h"

namespace dtrain::models {
namespace {

enum class Loss { kNll, kCrossEntropy };

// One training step without the optimizer.
void Step(Model& model, const torch::Tensor& input, const torch::Tensor& target,
          Loss loss) {
  model.zero_grad();
  const torch::Tensor output = model.forward(input);
  const torch::Tensor value =
      loss == Loss::kNll ? torch::nn::functional::nll_loss(output, target)
                         : torch::nn::functional::cross_entropy(output, target);
  value.backward();
}

void RunForwardBackward(benchmark::State& state, Model& model, int64_t batch,
                        int64_t channels, int64_t size, int64_t classes,
                        Loss loss) {
  bench::UseOneThread();
  model.train();
  const torch::Tensor input = torch::randn({batch, channels, size, size});
  const torch::Tensor target = torch::randint(classes, {batch});
  // The first step allocates and builds oneDNN primitives: not measured.
  Step(model, input, target, loss);
  for (auto _ : state) {
    Step(model, input, target, loss);
  }
  state.SetItemsProcessed(state.iterations() * batch);
  state.counters["batch"] = static_cast<double>(batch);
  state.counters["px"] = static_cast<double>(size);
}

// Args: batch. MNIST-sized inputs, 10 classes.
void BM_ConvNetForwardBackward(benchmark::State& state) {
  torch::manual_seed(0);
  ConvNetImpl model;
  RunForwardBackward(state, model, state.range(0), 1, 28, 10, Loss::kNll);
}
BENCHMARK(BM_ConvNetForwardBackward)
    ->ArgName("batch")
    ->Arg(32)
    ->Arg(64)
    ->Arg(128)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Args: batch, image side. torchvision's stem, 10 classes (STL-10, CIFAR).
void BM_ResNet18ForwardBackward(benchmark::State& state) {
  torch::manual_seed(0);
  ResNet18Options options;
  options.num_classes = 10;
  ResNet18Impl model(options);
  RunForwardBackward(state, model, state.range(0), 3, state.range(1), 10,
                     Loss::kCrossEntropy);
}
BENCHMARK(BM_ResNet18ForwardBackward)
    ->ArgNames({"batch", "px"})
    ->Args({32, 32})
    ->Args({32, 96})
    // Batch 32 at 224 px (the AWS tutorial's) takes seconds per step on one
    // core: batch 8 gives the per-image cost quicker (--benchmark_filter).
    ->Args({8, 224})
    ->Args({32, 224})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Args: batch, image side. The small-image stem keeps 32 px maps through the
// first stage: about as much work per image as the standard stem at 128 px.
void BM_ResNet18SmallStemForwardBackward(benchmark::State& state) {
  torch::manual_seed(0);
  ResNet18Options options;
  options.num_classes = 10;
  options.small_input_stem = true;
  ResNet18Impl model(options);
  RunForwardBackward(state, model, state.range(0), 3, state.range(1), 10,
                     Loss::kCrossEntropy);
}
BENCHMARK(BM_ResNet18SmallStemForwardBackward)
    ->ArgNames({"batch", "px"})
    ->Args({32, 32})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// One Adadelta step over all of a model's parameters (arg 0: ConvNet, 1:
// ResNet-18 with 10 classes), gradients already in place.
void BM_AdadeltaStep(benchmark::State& state) {
  bench::UseOneThread();
  torch::manual_seed(0);
  ResNet18Options options;
  options.num_classes = 10;
  std::shared_ptr<Model> model;
  if (state.range(0) == 0) {
    model = std::make_shared<ConvNetImpl>();
  } else {
    model = std::make_shared<ResNet18Impl>(options);
  }
  for (torch::Tensor& p : model->parameters()) {
    p.mutable_grad() = torch::randn_like(p);
  }
  optim::Adadelta optimizer(model->parameters(), optim::AdadeltaOptions(0.5));
  optimizer.step();
  for (auto _ : state) optimizer.step();
  state.SetLabel(state.range(0) == 0 ? "convnet" : "resnet18");
  state.counters["params"] = static_cast<double>(NumParameters(*model));
}
BENCHMARK(BM_AdadeltaStep)
    ->ArgName("model")
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace dtrain::models

int main(int argc, char** argv) {
  return dtrain::bench::RunOnOneThread(argc, argv);
}
