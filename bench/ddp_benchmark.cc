// DistributedDataParallel on the book's ConvNet (MNIST-sized input, train
// mode, SGD), ranks as threads of this process with Gloo over loopback (Google
// Benchmark's ->Threads(n): thread i is rank i), one intra-op thread each.
//
//   OPENBLAS_NUM_THREADS=1 bazel run //bench:ddp_benchmark --
//       --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//   (one command line)
//
// BM_PlainStep: zero_grad, forward, NLL loss, backward, SGD step, no DDP; with
//   2 threads, two ranks that train without communicating (the reference for
//   "2 processes within 10% of no communication").
// BM_DdpStep: the same step through DDP (PrepareForward, backward with bucket
//   hooks, SynchronizeGradients) at world sizes 1 and 2, with PyTorch's bucket
//   cap (25 MiB) and with 1 MiB. Counters, per step and averaged over ranks:
//   step_ms, compute_ms (forward + backward, hooks included), exposed_comm_ms
//   (blocked in SynchronizeGradients waiting for allreduces), sync_ms (all of
//   SynchronizeGradients), last_launch_ms (first gradient hook to the last
//   bucket's launch), hooks_ms, buckets; the label lists the bucket sizes.
//   Each with gradients as bucket views (view:1, the default: no copies) and
//   without (view:0: copied into the buckets in the hooks and back into
//   .grad in SynchronizeGradients).
// BM_BucketView: gradients as bucket views against copies, steps alternating
//   on identical models, at world sizes 1 and 2.
// BM_DdpOverhead: world size 1, a plain step and a DDP step on identical models
//   alternating inside one loop, so that drift on this shared machine hits both
//   alike; overhead_pct = ddp_ms / plain_ms - 1 (target <= 3%).
//
// With threads, Google Benchmark's Time column is wall time divided by the
// iterations of all threads together (a throughput); step_ms is one step as
// each rank sees it.
// Times are wall-clock (UseRealTime). Threads: see models_benchmark.cc; set
// OPENBLAS_NUM_THREADS=1 for numbers to report.

#include <ATen/Parallel.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "bench/bench_util.h"
#include "benchmark/benchmark.h"
#include "dist/backend/gloo/gloo_backend.h"
#include "dist/ddp/ddp.h"
#include "dist/store/hash_store.h"
#include "models/convnet.h"

namespace dtrain::ddp {
namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

struct Batch {
  torch::Tensor input;
  torch::Tensor target;
};

Batch MakeBatch(int64_t batch) {
  return {torch::randn({batch, 1, 28, 28}), torch::randint(10, {batch})};
}

torch::optim::SGD MakeSgd(models::ConvNetImpl& model) {
  return torch::optim::SGD(model.parameters(),
                           torch::optim::SGDOptions(0.01).momentum(0.5));
}

// zero_grad, forward, loss, backward; returns the time of the last three.
Clock::duration ForwardBackward(models::ConvNetImpl& model,
                                torch::optim::SGD& sgd, const Batch& batch) {
  (void)sgd;
  // In place, as the trainer does (LibTorch 2's Optimizer::zero_grad resets
  // .grad, which would cost the bucket views a copy per step).
  model.zero_grad(/*set_to_none=*/false);
  const auto start = Clock::now();
  torch::nn::functional::nll_loss(model.forward(batch.input), batch.target)
      .backward();
  return Clock::now() - start;
}

void PlainStep(models::ConvNetImpl& model, torch::optim::SGD& sgd,
               const Batch& batch) {
  ForwardBackward(model, sgd, batch);
  sgd.step();
}

// Returns false (after telling `state`) when DDP fails.
bool DdpStep(benchmark::State& state, DistributedDataParallel& ddp,
             models::ConvNetImpl& model, torch::optim::SGD& sgd,
             const Batch& batch, Clock::duration* compute) {
  absl::Status s = ddp.PrepareForward();
  const Clock::duration c = ForwardBackward(model, sgd, batch);
  if (compute != nullptr) *compute += c;
  if (s.ok()) s = ddp.SynchronizeGradients();
  if (!s.ok()) {
    state.SkipWithError(std::string(s.message()).c_str());
    return false;
  }
  sgd.step();
  return true;
}

absl::StatusOr<std::unique_ptr<backend::Backend>> Connect(
    benchmark::State& state) {
  backend::Membership group;
  group.rank = state.thread_index();
  group.world_size = state.threads();
  group.store = bench::RunStore(state);
  group.timeout = absl::Seconds(120);
  backend::GlooBackendOptions o;
  o.hostname = "127.0.0.1";
  return backend::CreateGlooBackend(group, o);
}

std::string BucketSizes(const DistributedDataParallel& ddp) {
  std::vector<std::string> sizes;
  for (const BucketInfo& b : ddp.buckets()) {
    sizes.push_back(absl::StrFormat("%.1f KiB", b.bytes / 1024.0));
  }
  return absl::StrCat("buckets: ", absl::StrJoin(sizes, ", "));
}

benchmark::Counter PerStep(double total, int64_t steps) {
  return benchmark::Counter(total / static_cast<double>(steps),
                            benchmark::Counter::kAvgThreads);
}

// Args: batch per rank.
void BM_PlainStep(benchmark::State& state) {
  bench::UseOneThread();
  auto model = std::make_shared<models::ConvNetImpl>();
  model->train();
  torch::optim::SGD sgd = MakeSgd(*model);
  const Batch batch = MakeBatch(state.range(0));
  PlainStep(*model, sgd, batch);  // oneDNN primitives, allocations.
  const auto start = Clock::now();
  for (auto _ : state) PlainStep(*model, sgd, batch);
  state.counters["step_ms"] = PerStep(Ms(Clock::now() - start),
                                      std::max<int64_t>(state.iterations(), 1));
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_PlainStep)
    ->ArgName("batch")
    ->Arg(64)
    ->Threads(1)
    ->Threads(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Args: batch per rank, cap of the buckets after the first in KiB, gradients
// as bucket views (1) or copied in and out (0).
void BM_DdpStep(benchmark::State& state) {
  bench::UseOneThread();
  auto backend = Connect(state);
  if (!backend.ok()) {
    state.SkipWithError(std::string(backend.status().message()).c_str());
    return;
  }
  auto model = std::make_shared<models::ConvNetImpl>();
  model->train();
  DdpOptions options;
  options.bucket_cap_bytes = state.range(1) << 10;
  options.gradient_as_bucket_view = state.range(2) != 0;
  auto ddp = DistributedDataParallel::Create(model, **backend, options);
  if (!ddp.ok()) {
    state.SkipWithError(std::string(ddp.status().message()).c_str());
    return;
  }
  torch::optim::SGD sgd = MakeSgd(*model);
  const Batch batch = MakeBatch(state.range(0));
  if (!DdpStep(state, **ddp, *model, sgd, batch, nullptr)) return;
  const auto start = Clock::now();
  Clock::duration compute{};
  absl::Duration exposed, sync, last_launch, hooks;
  for (auto _ : state) {
    if (!DdpStep(state, **ddp, *model, sgd, batch, &compute)) break;
    const StepStats& stats = (*ddp)->last_step_stats();
    exposed += stats.exposed_communication;
    sync += stats.synchronize;
    last_launch += stats.backward_until_last_launch;
    hooks += stats.hooks;
  }
  const int64_t n = std::max<int64_t>(state.iterations(), 1);
  state.counters["step_ms"] = PerStep(Ms(Clock::now() - start), n);
  state.counters["compute_ms"] = PerStep(Ms(compute), n);
  state.counters["exposed_comm_ms"] =
      PerStep(absl::ToDoubleMilliseconds(exposed), n);
  state.counters["sync_ms"] = PerStep(absl::ToDoubleMilliseconds(sync), n);
  state.counters["last_launch_ms"] =
      PerStep(absl::ToDoubleMilliseconds(last_launch), n);
  state.counters["hooks_ms"] = PerStep(absl::ToDoubleMilliseconds(hooks), n);
  state.counters["buckets"] =
      benchmark::Counter(static_cast<double>((*ddp)->buckets().size()),
                         benchmark::Counter::kAvgThreads);
  state.SetLabel(BucketSizes(**ddp));
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_DdpStep)
    ->ArgNames({"batch", "cap_KiB", "view"})
    // PyTorch's default cap; then 1 MiB, which gives fc1.weight (1.1 MiB) a
    // bucket of its own that overlaps the convolutions' backward; each with
    // and without bucket views.
    ->Args({64, 25 << 10, 1})
    ->Args({64, 25 << 10, 0})
    ->Args({64, 1 << 10, 1})
    ->Args({64, 1 << 10, 0})
    ->Threads(1)
    ->Threads(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// World size 1: plain and DDP steps alternate (which goes first alternates
// too) on two models with the same weights.
void BM_DdpOverhead(benchmark::State& state) {
  bench::UseOneThread();
  auto backend = Connect(state);
  if (!backend.ok()) {
    state.SkipWithError(std::string(backend.status().message()).c_str());
    return;
  }
  torch::manual_seed(0);
  auto plain = std::make_shared<models::ConvNetImpl>();
  torch::manual_seed(0);
  auto wrapped = std::make_shared<models::ConvNetImpl>();
  plain->train();
  wrapped->train();
  auto ddp = DistributedDataParallel::Create(wrapped, **backend);
  if (!ddp.ok()) {
    state.SkipWithError(std::string(ddp.status().message()).c_str());
    return;
  }
  torch::optim::SGD plain_sgd = MakeSgd(*plain);
  torch::optim::SGD ddp_sgd = MakeSgd(*wrapped);
  const Batch batch = MakeBatch(state.range(0));
  PlainStep(*plain, plain_sgd, batch);
  if (!DdpStep(state, **ddp, *wrapped, ddp_sgd, batch, nullptr)) return;
  Clock::duration plain_time{}, ddp_time{};
  bool plain_first = true;
  bool failed = false;
  for (auto _ : state) {
    for (int i = 0; i < 2 && !failed; ++i) {
      const auto start = Clock::now();
      if (plain_first == (i == 0)) {
        PlainStep(*plain, plain_sgd, batch);
        plain_time += Clock::now() - start;
      } else {
        failed = !DdpStep(state, **ddp, *wrapped, ddp_sgd, batch, nullptr);
        ddp_time += Clock::now() - start;
      }
    }
    if (failed) break;
    plain_first = !plain_first;
  }
  const int64_t n = std::max<int64_t>(state.iterations(), 1);
  state.counters["plain_ms"] = PerStep(Ms(plain_time), n);
  state.counters["ddp_ms"] = PerStep(Ms(ddp_time), n);
  state.counters["overhead_pct"] =
      100.0 * (Ms(ddp_time) / std::max(Ms(plain_time), 1e-9) - 1.0);
  state.SetLabel(BucketSizes(**ddp));
}
BENCHMARK(BM_DdpOverhead)
    ->ArgName("batch")
    ->Arg(64)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Gradients as bucket views against copies, alternating on two models with
// the same weights (which goes first alternates too), so that drift hits both
// alike. Per step: view_ms and copy_ms, and what DDP itself spends in each
// (ddp_*_ms: hooks plus SynchronizeGradients, the part the copies live in);
// saved_pct = 1 - view_ms / copy_ms.
void BM_BucketView(benchmark::State& state) {
  bench::UseOneThread();
  auto backend = Connect(state);
  if (!backend.ok()) {
    state.SkipWithError(std::string(backend.status().message()).c_str());
    return;
  }
  std::shared_ptr<models::ConvNetImpl> models[2];
  std::unique_ptr<DistributedDataParallel> ddps[2];
  for (int view = 0; view < 2; ++view) {
    torch::manual_seed(0);
    models[view] = std::make_shared<models::ConvNetImpl>();
    models[view]->train();
    DdpOptions options;
    options.bucket_cap_bytes = state.range(1) << 10;
    options.gradient_as_bucket_view = view == 1;
    auto ddp =
        DistributedDataParallel::Create(models[view], **backend, options);
    if (!ddp.ok()) {
      state.SkipWithError(std::string(ddp.status().message()).c_str());
      return;
    }
    ddps[view] = *std::move(ddp);
  }
  torch::optim::SGD sgds[2] = {MakeSgd(*models[0]), MakeSgd(*models[1])};
  const Batch batch = MakeBatch(state.range(0));
  for (int view = 0; view < 2; ++view) {
    if (!DdpStep(state, *ddps[view], *models[view], sgds[view], batch,
                 nullptr)) {
      return;
    }
  }
  Clock::duration time[2] = {};
  absl::Duration ddp_time[2];
  bool view_first = true;
  bool failed = false;
  for (auto _ : state) {
    for (int i = 0; i < 2 && !failed; ++i) {
      const int view = (i == 0) == view_first ? 1 : 0;
      const auto start = Clock::now();
      failed = !DdpStep(state, *ddps[view], *models[view], sgds[view], batch,
                        nullptr);
      time[view] += Clock::now() - start;
      const StepStats& stats = ddps[view]->last_step_stats();
      ddp_time[view] += stats.hooks + stats.synchronize;
    }
    if (failed) break;
    view_first = !view_first;
  }
  const int64_t n = std::max<int64_t>(state.iterations(), 1);
  state.counters["view_ms"] = PerStep(Ms(time[1]), n);
  state.counters["copy_ms"] = PerStep(Ms(time[0]), n);
  state.counters["ddp_view_ms"] =
      PerStep(absl::ToDoubleMilliseconds(ddp_time[1]), n);
  state.counters["ddp_copy_ms"] =
      PerStep(absl::ToDoubleMilliseconds(ddp_time[0]), n);
  state.counters["saved_pct"] =
      100.0 * (1.0 - Ms(time[1]) / std::max(Ms(time[0]), 1e-9));
  state.SetLabel(BucketSizes(*ddps[1]));
}
BENCHMARK(BM_BucketView)
    ->ArgNames({"batch", "cap_KiB"})
    ->Args({64, 25 << 10})
    ->Threads(1)
    ->Threads(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace dtrain::ddp

int main(int argc, char** argv) {
  return dtrain::bench::RunOnOneThread(argc, argv);
}
