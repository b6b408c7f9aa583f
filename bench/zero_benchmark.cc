// ZeRO (dist/zero/sharded_optimizer.h) against unsharded DDP with Adam on the
// book's ConvNet (MNIST-sized input, train mode), ranks as threads of this
// process on the shared-memory backend (one host; Google Benchmark's
// ->Threads(n): thread i is rank i), one intra-op thread each.
//
//   OPENBLAS_NUM_THREADS=1 bazel run //bench:zero_benchmark --
//       --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//   (one command line)
//
// BM_ShardedStep/stage:S: a DDP step with Adam over every parameter and a
//   step with ZeRO stage S (1: DDP's allreduce, this rank's share stepped,
//   parameters allgathered; 2: each bucket reduce-scattered instead),
//   alternating on identical models inside one loop, so that drift on this
//   shared machine hits both alike. Counters, per step and averaged over
//   ranks: ddp_ms and zero_ms (the whole step), ddp_opt_ms and zero_opt_ms
//   (from the end of SynchronizeGradients to the updated parameters: the
//   optimizer step, plus the allgather for ZeRO), zero_over_ddp (zero_ms /
//   ddp_ms), state_MiB (Adam's state on one rank: ZeRO's is 1/N).
//
// Times are wall-clock (UseRealTime); set OPENBLAS_NUM_THREADS=1 for numbers
// to report.

#include <torch/nn/functional/loss.h>
#include <torch/optim/adam.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "bench/bench_util.h"
#include "benchmark/benchmark.h"
#include "dist/backend/shm/shm_backend.h"
#include "dist/ddp/ddp.h"
#include "dist/zero/sharded_optimizer.h"
#include "models/convnet.h"

namespace dtrain::zero {
namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

std::unique_ptr<torch::optim::Optimizer> MakeAdam(
    std::vector<at::Tensor> params) {
  return std::make_unique<torch::optim::Adam>(params,
                                              torch::optim::AdamOptions(1e-3));
}

// Adam's state on this rank, in bytes.
double StateBytes(torch::optim::Optimizer& o) {
  double bytes = 0;
  for (const auto& [key, state] : o.state()) {
    (void)key;
    const auto& adam = static_cast<const torch::optim::AdamParamState&>(*state);
    bytes += adam.exp_avg().nbytes() + adam.exp_avg_sq().nbytes();
  }
  return bytes;
}

// One model, its DDP and what steps it: Adam over every parameter, or ZeRO.
struct Replica {
  std::shared_ptr<models::ConvNetImpl> model;
  std::unique_ptr<ddp::DistributedDataParallel> ddp;
  std::unique_ptr<torch::optim::Optimizer> adam;  // unsharded
  std::unique_ptr<ShardedOptimizer> zero;
  Clock::duration total{};
  Clock::duration stepping{};

  torch::optim::Optimizer& optimizer() {
    return zero != nullptr ? zero->optimizer() : *adam;
  }

  // One training step; its times added to `total` and `stepping`.
  absl::Status Step(const at::Tensor& input, const at::Tensor& target) {
    const auto start = Clock::now();
    model->zero_grad(/*set_to_none=*/false);
    DTRAIN_RETURN_IF_ERROR(ddp->PrepareForward());
    torch::nn::functional::nll_loss(model->forward(input), target).backward();
    DTRAIN_RETURN_IF_ERROR(ddp->SynchronizeGradients());
    const auto synced = Clock::now();
    absl::Status s;
    if (zero != nullptr) {
      s = zero->Step();
    } else {
      adam->step();
    }
    const auto end = Clock::now();
    total += end - start;
    stepping += end - synced;
    return s;
  }
};

absl::StatusOr<std::unique_ptr<backend::Backend>> Connect(
    benchmark::State& state) {
  backend::Membership group;
  group.rank = state.thread_index();
  group.world_size = state.threads();
  group.store = bench::RunStore(state);
  group.timeout = absl::Seconds(120);
  return backend::CreateShmBackend(group);
}

benchmark::Counter PerStep(double total, int64_t steps) {
  return benchmark::Counter(total / static_cast<double>(steps),
                            benchmark::Counter::kAvgThreads);
}

// Args: ZeRO stage, batch per rank.
void BM_ShardedStep(benchmark::State& state) {
  bench::UseOneThread();
  auto backend = Connect(state);
  if (!backend.ok()) {
    state.SkipWithError(std::string(backend.status().message()).c_str());
    return;
  }
  Replica replicas[2];  // [0]: unsharded, [1]: ZeRO
  for (int i = 0; i < 2; ++i) {
    Replica& r = replicas[i];
    torch::manual_seed(0);
    r.model = std::make_shared<models::ConvNetImpl>();
    r.model->train();
    ddp::DdpOptions options;
    options.pad_buckets_to_world_size = i == 1 && state.range(0) == 2;
    auto ddp =
        ddp::DistributedDataParallel::Create(r.model, **backend, options);
    if (!ddp.ok()) {
      state.SkipWithError(std::string(ddp.status().message()).c_str());
      return;
    }
    r.ddp = *std::move(ddp);
    if (i == 0) {
      r.adam = MakeAdam(r.model->parameters());
      continue;
    }
    ShardedOptimizerOptions o;
    o.stage = static_cast<int>(state.range(0));
    auto zero = ShardedOptimizer::Create(*r.ddp, o, MakeAdam);
    if (!zero.ok()) {
      state.SkipWithError(std::string(zero.status().message()).c_str());
      return;
    }
    r.zero = *std::move(zero);
  }
  const at::Tensor input = torch::randn({state.range(1), 1, 28, 28});
  const at::Tensor target = torch::randint(10, {state.range(1)});
  // A first step each, untimed: Adam's state comes into being.
  for (Replica& r : replicas) {
    if (absl::Status s = r.Step(input, target); !s.ok()) {
      state.SkipWithError(std::string(s.message()).c_str());
      return;
    }
    r.total = r.stepping = Clock::duration{};
  }
  bool zero_first = false;
  for (auto _ : state) {
    for (int i = 0; i < 2; ++i) {
      Replica& r = replicas[(i == 0) == zero_first ? 1 : 0];
      if (absl::Status s = r.Step(input, target); !s.ok()) {
        state.SkipWithError(std::string(s.message()).c_str());
        return;
      }
    }
    zero_first = !zero_first;
  }
  const int64_t n = std::max<int64_t>(state.iterations(), 1);
  state.counters["ddp_ms"] = PerStep(Ms(replicas[0].total), n);
  state.counters["zero_ms"] = PerStep(Ms(replicas[1].total), n);
  state.counters["ddp_opt_ms"] = PerStep(Ms(replicas[0].stepping), n);
  state.counters["zero_opt_ms"] = PerStep(Ms(replicas[1].stepping), n);
  state.counters["zero_over_ddp"] = benchmark::Counter(
      Ms(replicas[1].total) / std::max(Ms(replicas[0].total), 1e-9),
      benchmark::Counter::kAvgThreads);
  state.counters["ddp_state_MiB"] =
      benchmark::Counter(StateBytes(replicas[0].optimizer()) / (1 << 20),
                         benchmark::Counter::kAvgThreads);
  state.counters["zero_state_MiB"] =
      benchmark::Counter(StateBytes(replicas[1].optimizer()) / (1 << 20),
                         benchmark::Counter::kAvgThreads);
}
BENCHMARK(BM_ShardedStep)
    ->ArgNames({"stage", "batch"})
    ->Args({1, 64})
    ->Args({2, 64})
    ->Threads(2)
    ->Threads(4)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace dtrain::zero

int main(int argc, char** argv) {
  return dtrain::bench::RunOnOneThread(argc, argv);
}
