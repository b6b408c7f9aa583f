// nccl_allreduce_bandwidth: the project's NCCL backend's allreduce bus
// bandwidth on every visible GPU, as nccl-tests' all_reduce_perf measures it:
// one process, one thread per GPU (thread i is rank i, device i), ranks
// meeting through an in-memory store. For each message size it checks the
// result once (rank r contributes r + 1, every element must be n(n+1)/2), then
// times a batch of allreduces of zeros and synchronizes the device through
// LibTorch before stopping the clock, so the time is right whether Work's Wait
// blocks the host or only makes the caller's stream wait (a blocking Wait adds
// a host round trip per allreduce, which shows only at small sizes).
//
//   bazel run //bench:nccl_allreduce_bandwidth
//   bazel run //bench:nccl_allreduce_bandwidth -- --min_bytes=8M --gpus=2
//
// Or one rank per process, started by the caller with the same new
// --store_path (a file store; not one left by an earlier run) and each its
// own --rank and --device: ranks that share a GPU
// (DTRAIN_NCCL_SHARE_GPU=1, the one-GPU machines' only two-rank setup) need
// processes of their own. Rank 0 prints the results.
//
//   DTRAIN_NCCL_SHARE_GPU=1 nccl_allreduce_bandwidth --store_path=/tmp/s
//       --world_size=2 --rank=R --device=0   (one line, one per rank)
//
// Prints a table, then one JSON line (the last line of stdout):
//   {"format": "dtrain.nccl_allreduce_bandwidth.v1", "gpus": 8,
//    "ranks": 8, "results": [{"bytes": 1048576, "time_us": 52.1,
//    "host_us": 8.3, "algbw_GBps": 20.1, "busbw_GBps": 35.2,
//    "correct": true}, ...], "max_busbw_GBps": 180.3}
// algbw = bytes / time; busbw = algbw * 2(n-1)/n (0 for one GPU), the rate
// each GPU's links carry in a ring, comparable with the links' speed. The
// time is the slowest rank's; host_us is the time the issuing thread spent
// per collective in AllReduce and Wait (the slowest rank's): what each DDP
// bucket costs the thread that runs backward. Exits 0 when every size was
// correct; 1 with one line on stderr when it cannot run (no NCCL, no GPU, a
// CPU-only LibTorch) or a collective failed or was wrong; 2 for bad flags.

#include <ATen/ATen.h>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "base/cuda_device.h"
#include "base/duration_flag.h"
#include "base/status_macros.h"
#include "base/torch_guard.h"
#include "bench/sweep.h"
#include "dist/backend/backend.h"
#include "dist/backend/nccl/nccl_backend.h"
#include "dist/store/file_store.h"
#include "dist/store/hash_store.h"

ABSL_FLAG(std::string, min_bytes, "1M",
          "Smallest message, in bytes (suffix K, M or G: binary units).");
ABSL_FLAG(std::string, max_bytes, "256M", "Largest message, in bytes.");
ABSL_FLAG(int, step_factor, 2, "Each size is this many times the previous.");
ABSL_FLAG(int, iters, 20, "Timed allreduces per size.");
ABSL_FLAG(int, warmup_iters, 5, "Untimed allreduces per size first.");
ABSL_FLAG(int, gpus, 0, "Ranks (one per GPU, devices 0..N-1; 0: all).");
ABSL_FLAG(std::string, store_path, "",
          "One rank per process: the file store every rank names (empty: "
          "one process, one thread per GPU).");
ABSL_FLAG(int, rank, 0, "With --store_path: this process's rank.");
ABSL_FLAG(int, world_size, 2, "With --store_path: how many ranks.");
ABSL_FLAG(int, device, -1,
          "With --store_path: the CUDA device (default: the rank).");
ABSL_FLAG(dtrain::base::DurationFlag, timeout,
          dtrain::base::DurationFlag(absl::Seconds(120)),
          "Bounds creating the communicators and every collective.");

namespace dtrain::bench {
namespace {

constexpr char kName[] = "nccl_allreduce_bandwidth";

// Lets the rank threads start each timed batch together (C++17 has no
// std::barrier). Reusable: each Arrive waits for the current generation. A
// rank that fails calls Break, so that the others stop waiting for it.
class ThreadBarrier {
 public:
  explicit ThreadBarrier(int count) : count_(count) {}

  // False once broken.
  bool Arrive() {
    std::unique_lock<std::mutex> lock(mu_);
    const int64_t generation = generation_;
    if (++arrived_ == count_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return !broken_;
    }
    cv_.wait(lock, [&] { return generation_ != generation || broken_; });
    return !broken_;
  }

  void Break() {
    std::lock_guard<std::mutex> lock(mu_);
    broken_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  const int count_;
  int arrived_ = 0;         // Guarded by mu_.
  int64_t generation_ = 0;  // Guarded by mu_.
  bool broken_ = false;     // Guarded by mu_.
};

struct SizeResult {
  int64_t bytes = 0;
  double seconds = 0;       // per allreduce, slowest rank
  double host_seconds = 0;  // per allreduce in AllReduce + Wait, slowest rank
  bool correct = false;
};

struct Config {
  std::vector<int64_t> sizes;
  int iters = 0;
  int warmup_iters = 0;
  int world_size = 0;
  int gpus = 0;  // Distinct devices in use.
  absl::Duration timeout;
  // One rank per process (store_path set): this one.
  std::string store_path;
  int rank = 0;
  int device = 0;
};

// What every rank writes, each into its own slot.
struct RankOutcome {
  absl::Status status;
  std::vector<double> seconds;       // per size, per allreduce
  std::vector<double> host_seconds;  // per size, per allreduce
  std::vector<bool> correct;         // per size
};

// Issues one allreduce and Waits for it, adding the host time both took.
absl::Status Issue(backend::Backend& b, const at::Tensor& t,
                   absl::Duration timeout, int64_t bytes,
                   double* host_seconds = nullptr) {
  const auto start = std::chrono::steady_clock::now();
  absl::Status s =
      b.AllReduce(t, backend::ReduceOp::kSum, absl::StrCat(bytes, " B"))
          ->Wait(timeout);
  if (host_seconds != nullptr) {
    *host_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
  }
  return s;
}

// Starts every timed batch on all ranks together: false when another rank
// failed.
using StartTogether = std::function<bool(backend::Backend&)>;

absl::Status RunRank(int rank, int device, const Config& c,
                     std::shared_ptr<store::Store> store,
                     const StartTogether& start_together, RankOutcome& out) {
  DTRAIN_RETURN_IF_ERROR(base::SetCurrentCudaDevice(device));
  backend::Membership group;
  group.rank = rank;
  group.world_size = c.world_size;
  group.store = std::move(store);
  group.timeout = c.timeout;
  backend::NcclBackendOptions o;
  o.device = device;
  DTRAIN_ASSIGN_OR_RETURN(std::unique_ptr<backend::Backend> b,
                          backend::CreateNcclBackend(group, o));
  const at::TensorOptions opts =
      at::TensorOptions().dtype(at::kFloat).device(at::kCUDA, device);
  const double n = c.world_size;
  const float want = static_cast<float>(n * (n + 1) / 2);
  return base::GuardTorch(
      absl::StatusCode::kInternal, absl::StrCat("[rank ", rank, "] LibTorch: "),
      [&]() -> absl::Status {
        for (int64_t bytes : c.sizes) {
          at::Tensor t =
              at::full({bytes / 4}, static_cast<float>(rank + 1), opts);
          // Read on the host: wait for the result itself (on CUDA, Wait only
          // orders the stream, and a failure would read as a wrong sum).
          DTRAIN_RETURN_IF_ERROR(b->AllReduce(t, backend::ReduceOp::kSum,
                                              absl::StrCat(bytes, " B"))
                                     ->WaitForResult(c.timeout));
          out.correct.push_back(t.eq(want).all().item<bool>());
          // Zeros from here on: sums stay finite however many iterations run.
          t.zero_();
          for (int i = 0; i < c.warmup_iters; ++i) {
            DTRAIN_RETURN_IF_ERROR(Issue(*b, t, c.timeout, bytes));
          }
          torch::cuda::synchronize(device);
          if (!start_together(*b)) {
            return absl::AbortedError(
                absl::StrCat("[rank ", rank, "] stopped: another rank failed"));
          }
          double host = 0;
          const auto start = std::chrono::steady_clock::now();
          for (int i = 0; i < c.iters; ++i) {
            DTRAIN_RETURN_IF_ERROR(Issue(*b, t, c.timeout, bytes, &host));
          }
          torch::cuda::synchronize(device);
          const std::chrono::duration<double> took =
              std::chrono::steady_clock::now() - start;
          out.seconds.push_back(took.count() / c.iters);
          out.host_seconds.push_back(host / c.iters);
        }
        return absl::OkStatus();
      });
}

// Why this cannot run here, or OK.
absl::Status CheckCanRun() {
  std::string reason;
  if (!backend::NcclAvailable(&reason)) {
    return absl::FailedPreconditionError(
        absl::StrCat("built without NCCL: ", reason));
  }
  DTRAIN_ASSIGN_OR_RETURN(const int runtime_count, base::CudaDeviceCount());
  if (runtime_count == 0) {
    return absl::FailedPreconditionError(
        "no GPU: the CUDA runtime sees no device (check nvidia-smi and "
        "CUDA_VISIBLE_DEVICES)");
  }
  if (!torch::cuda::is_available()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the CUDA runtime sees ", runtime_count,
        " GPU(s) but LibTorch sees none: a CPU-only LibTorch? Rebuild with "
        "LIBTORCH_HOME pointing at a CUDA build (docs/GPU.md)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Config> ConfigFromFlags() {
  Config c;
  DTRAIN_ASSIGN_OR_RETURN(
      const int64_t min_bytes,
      ParseBytes("min_bytes", absl::GetFlag(FLAGS_min_bytes)));
  DTRAIN_ASSIGN_OR_RETURN(
      const int64_t max_bytes,
      ParseBytes("max_bytes", absl::GetFlag(FLAGS_max_bytes)));
  DTRAIN_ASSIGN_OR_RETURN(
      c.sizes,
      SweepSizes(min_bytes, max_bytes, absl::GetFlag(FLAGS_step_factor)));
  c.iters = absl::GetFlag(FLAGS_iters);
  c.warmup_iters = absl::GetFlag(FLAGS_warmup_iters);
  c.timeout = absl::GetFlag(FLAGS_timeout).value;
  if (c.iters < 1 || c.warmup_iters < 0) {
    return absl::InvalidArgumentError("want --iters >= 1, --warmup_iters >= 0");
  }
  c.store_path = absl::GetFlag(FLAGS_store_path);
  if (c.store_path.empty()) {
    c.world_size = absl::GetFlag(FLAGS_gpus);
    if (c.world_size < 0) return absl::InvalidArgumentError("--gpus < 0");
    return c;
  }
  c.world_size = absl::GetFlag(FLAGS_world_size);
  c.rank = absl::GetFlag(FLAGS_rank);
  c.device = absl::GetFlag(FLAGS_device);
  if (c.device < 0) c.device = c.rank;
  if (c.world_size < 1 || c.rank < 0 || c.rank >= c.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("want 0 <= --rank < --world_size, got --rank=", c.rank,
                     " --world_size=", c.world_size));
  }
  return c;
}

// The slowest rank's times per size.
std::vector<SizeResult> Slowest(const Config& c,
                                const std::vector<RankOutcome>& outcomes) {
  std::vector<SizeResult> results;
  for (size_t i = 0; i < c.sizes.size(); ++i) {
    SizeResult r;
    r.bytes = c.sizes[i];
    r.correct = true;
    for (const RankOutcome& o : outcomes) {
      r.seconds = std::max(r.seconds, o.seconds[i]);
      r.host_seconds = std::max(r.host_seconds, o.host_seconds[i]);
      r.correct = r.correct && o.correct[i];
    }
    results.push_back(r);
  }
  return results;
}

// "seconds host_seconds correct" per size, through the store.
std::string EncodeOutcome(const RankOutcome& o) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < o.seconds.size(); ++i) {
    parts.push_back(absl::StrCat(o.seconds[i], " ", o.host_seconds[i], " ",
                                 o.correct[i] ? 1 : 0));
  }
  return absl::StrJoin(parts, ";");
}

absl::StatusOr<RankOutcome> DecodeOutcome(absl::string_view text,
                                          size_t sizes) {
  RankOutcome o;
  for (absl::string_view part : absl::StrSplit(text, ';', absl::SkipEmpty())) {
    std::vector<absl::string_view> f = absl::StrSplit(part, ' ');
    double seconds = 0, host = 0;
    int correct = 0;
    if (f.size() != 3 || !absl::SimpleAtod(f[0], &seconds) ||
        !absl::SimpleAtod(f[1], &host) || !absl::SimpleAtoi(f[2], &correct)) {
      return absl::DataLossError(
          absl::StrCat("bad timing record '", part, "'"));
    }
    o.seconds.push_back(seconds);
    o.host_seconds.push_back(host);
    o.correct.push_back(correct != 0);
  }
  if (o.seconds.size() != sizes)
    return absl::DataLossError("a timing record has the wrong length");
  return o;
}

// This process's rank of a job of processes; rank 0 gathers every rank's
// times through the store and returns the slowest, the others return none.
absl::StatusOr<std::vector<SizeResult>> MeasureOneRank(const Config& c) {
  DTRAIN_ASSIGN_OR_RETURN(
      std::shared_ptr<store::Store> store,
      store::FileStore::Open(c.store_path, c.world_size, c.timeout));
  RankOutcome mine;
  mine.status = RunRank(
      c.rank, c.device, c, store,
      [&](backend::Backend& b) {
        return b.Barrier()->WaitForResult(c.timeout).ok();
      },
      mine);
  DTRAIN_RETURN_IF_ERROR(mine.status);
  DTRAIN_RETURN_IF_ERROR(
      store->Set(absl::StrCat("times/", c.rank), EncodeOutcome(mine)));
  if (c.rank != 0) return std::vector<SizeResult>();
  std::vector<RankOutcome> outcomes;
  for (int r = 0; r < c.world_size; ++r) {
    DTRAIN_ASSIGN_OR_RETURN(std::string text,
                            store->Get(absl::StrCat("times/", r), c.timeout));
    DTRAIN_ASSIGN_OR_RETURN(RankOutcome o, DecodeOutcome(text, c.sizes.size()));
    outcomes.push_back(std::move(o));
  }
  return Slowest(c, outcomes);
}

// The slowest rank's time per size; the first rank's error if any failed.
absl::StatusOr<std::vector<SizeResult>> Measure(const Config& c) {
  if (!c.store_path.empty()) return MeasureOneRank(c);
  auto store = std::make_shared<store::HashStore>(c.timeout);
  ThreadBarrier barrier(c.world_size);
  std::vector<RankOutcome> outcomes(c.world_size);
  std::vector<std::thread> threads;
  for (int r = 0; r < c.world_size; ++r) {
    threads.emplace_back([&, r] {
      outcomes[r].status = RunRank(
          r, r, c, store, [&](backend::Backend&) { return barrier.Arrive(); },
          outcomes[r]);
      if (!outcomes[r].status.ok()) barrier.Break();
    });
  }
  for (std::thread& t : threads) t.join();
  // The first real error, not a rank that stopped because of it.
  for (const RankOutcome& o : outcomes) {
    if (!o.status.ok() && !absl::IsAborted(o.status)) return o.status;
  }
  for (const RankOutcome& o : outcomes) {
    if (!o.status.ok()) return o.status;
  }
  return Slowest(c, outcomes);
}

void Report(const Config& c, const std::vector<SizeResult>& results) {
  std::printf(
      "# %s: allreduce sum of float32, %d rank(s) on %d GPU(s), %d "
      "iterations per size, %s\n",
      kName, c.world_size, c.gpus, c.iters,
      c.store_path.empty() ? "one thread per GPU" : "one process per rank");
  std::printf("%14s %12s %10s %12s %12s %8s\n", "bytes", "time_us", "host_us",
              "algbw_GBps", "busbw_GBps", "correct");
  std::vector<std::string> json;
  double max_busbw = 0;
  for (const SizeResult& r : results) {
    const double algbw = r.bytes / r.seconds * 1e-9;
    const double busbw = algbw * AllReduceBusFactor(c.world_size);
    max_busbw = std::max(max_busbw, busbw);
    std::printf("%14lld %12.1f %10.1f %12.2f %12.2f %8s\n",
                static_cast<long long>(r.bytes), r.seconds * 1e6,
                r.host_seconds * 1e6, algbw, busbw, r.correct ? "yes" : "NO");
    json.push_back(absl::StrCat(
        "{\"bytes\": ", r.bytes, ", \"time_us\": ", r.seconds * 1e6,
        ", \"host_us\": ", r.host_seconds * 1e6, ", \"algbw_GBps\": ", algbw,
        ", \"busbw_GBps\": ", busbw,
        ", \"correct\": ", r.correct ? "true" : "false", "}"));
  }
  std::printf(
      "{\"format\": \"dtrain.nccl_allreduce_bandwidth.v1\", \"gpus\": %d, "
      "\"ranks\": %d, \"results\": [%s], \"max_busbw_GBps\": %s}\n",
      c.gpus, c.world_size, absl::StrJoin(json, ", ").c_str(),
      absl::StrCat(max_busbw).c_str());
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Allreduce bus bandwidth of the project's NCCL backend over every "
      "visible GPU (one thread per GPU), as nccl-tests' all_reduce_perf.\n"
      "  nccl_allreduce_bandwidth [--min_bytes=1M] [--max_bytes=256M] "
      "[--gpus=N]");
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) {
    std::fprintf(stderr, "%s: unexpected argument '%s'\n", kName, rest[1]);
    return 2;
  }
  absl::StatusOr<Config> config = ConfigFromFlags();
  if (!config.ok()) {
    std::fprintf(stderr, "%s: %s\n", kName,
                 std::string(config.status().message()).c_str());
    return 2;
  }
  if (absl::Status s = CheckCanRun(); !s.ok()) {
    std::fprintf(stderr, "%s: cannot run here: %s\n", kName,
                 std::string(s.message()).c_str());
    return 1;
  }
  const int visible = static_cast<int>(torch::cuda::device_count());
  if (config->store_path.empty()) {
    if (config->world_size == 0) config->world_size = visible;
    if (config->world_size > visible) {
      std::fprintf(stderr, "%s: --gpus=%d but only %d GPU(s) are visible\n",
                   kName, config->world_size, visible);
      return 2;
    }
    config->gpus = config->world_size;
  } else {
    if (config->device >= visible) {
      std::fprintf(stderr, "%s: --device=%d but only %d GPU(s) are visible\n",
                   kName, config->device, visible);
      return 2;
    }
    // Each process knows only its own device: ranks share one when told to
    // (the only reason to run ranks as processes here), else one each.
    const char* share = std::getenv("DTRAIN_NCCL_SHARE_GPU");
    config->gpus =
        share != nullptr && std::string(share) == "1" ? 1 : config->world_size;
  }
  absl::StatusOr<std::vector<SizeResult>> results = Measure(*config);
  if (!results.ok()) {
    std::fprintf(stderr, "%s: %s\n", kName,
                 std::string(results.status().message()).c_str());
    return 1;
  }
  if (results->empty()) return 0;  // A rank other than 0 of processes.
  Report(*config, *results);
  for (const SizeResult& r : *results) {
    if (!r.correct) {
      std::fprintf(stderr,
                   "%s: allreduce of %lld bytes gave a wrong sum (want %d x "
                   "(%d + 1) / 2 in every element)\n",
                   kName, static_cast<long long>(r.bytes), config->world_size,
                   config->world_size);
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace dtrain::bench

int main(int argc, char** argv) { return dtrain::bench::Main(argc, argv); }
