// shm_allreduce_bandwidth: allreduce of the shared-memory backend against
// Gloo over loopback TCP, between real processes of this host, as nccl-tests'
// all_reduce_perf measures it (issue #15). The driver forks one process per
// rank before it touches LibTorch, serves a TCP store on port 0 and hands the
// port to the ranks through pipes; each rank computes on one intra-op thread
// (so 4 ranks on 2 cores are not oversubscribed by LibTorch) and connects every
// backend named by --backends. For each message size, each backend's result
// is checked once (rank r contributes r + 1, every element must be
// n(n+1)/2), untimed batches of allreduces warm up and pick the iteration
// count (about --target_ms per repeat, at least --min_iters), then the repeats
// run interleaved across backends, so that the ratio between them is measured
// under the same load. A repeat's time is the slowest rank's; the table shows
// the median repeat. Before the sizes, Barrier() is timed the same way: the
// latency floor of each backend (handing a collective to its worker thread
// and back, and one synchronisation). Rank 0 prints. The backend
// "shm_buffers" is the shm backend on tensors from AllocateBuffer (one per
// size), which take the zero-copy allreduce.
//
//   bazel run //bench:shm_allreduce_bandwidth -- --processes=2
//   bazel run //bench:shm_allreduce_bandwidth -- --processes=4 --max_bytes=1M
//   bazel run //bench:shm_allreduce_bandwidth -- --backends=shm,shm_buffers
//
// Prints a table (algbw = bytes / time; busbw = algbw * 2(n-1)/n; the last
// column is the second backend's time over the first's, "gloo/shm" by
// default; cpu/wall is the CPU time all ranks spent per allreduce over its
// time, so at most the host's cores: near that, the ranks' waiting spins),
// then one JSON line, the last line of stdout:
//   {"format": "dtrain.shm_allreduce_bandwidth.v1", "processes": 2,
//    "backends": ["shm", "gloo"], "ratio": "gloo/shm",
//    "barrier_us": {"shm": 8.3, "gloo": 190.2},
//    "results": [{"bytes": 4, "correct": true, "ratio": 6.1,
//                 "shm": {"iters": 9000, "time_us": 4.1, "algbw_GBps": ...,
//                         "busbw_GBps": ..., "cpu_us": 7.9,
//                         "correct": true, "repeats_us": [...]},
//                 "gloo": {...}}, ...]}
// Exits 0 when every size was correct for every backend; 1 with the reason on
// stderr when a rank failed or a result was wrong; 2 for bad flags.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/compute_threads.h"
#include "base/duration_flag.h"
#include "base/machine_limits.h"
#include "base/status_macros.h"
#include "base/torch_guard.h"
#include "bench/sweep.h"
#include "dist/backend/backend.h"
#include "dist/backend/gloo/gloo_backend.h"
#include "dist/backend/shm/shm_backend.h"
#include "dist/store/tcp_store.h"

ABSL_FLAG(int, processes, 2, "Ranks, each a process of its own.");
ABSL_FLAG(std::vector<std::string>, backends,
          std::vector<std::string>({"shm", "gloo"}),
          "Backends to measure side by side (shm, shm_buffers: shm on its "
          "own buffers, gloo); with two, the last column is the second's "
          "time over the first's.");
ABSL_FLAG(std::string, min_bytes, "4",
          "Smallest message, in bytes (suffix K, M or G: binary units).");
ABSL_FLAG(std::string, max_bytes, "64M", "Largest message, in bytes.");
ABSL_FLAG(int, step_factor, 2, "Each size is this many times the previous.");
ABSL_FLAG(int, repeats, 5, "Timed repeats per size; the median is reported.");
ABSL_FLAG(double, target_ms, 50,
          "Each repeat runs about this long (the iteration count comes from "
          "the untimed allreduces).");
ABSL_FLAG(int, min_iters, 3, "At least this many allreduces per repeat.");
ABSL_FLAG(int, max_iters, 20000, "At most this many allreduces per repeat.");
ABSL_FLAG(int, warmup_iters, 3,
          "The first batch of untimed allreduces per size and backend (see "
          "Calibrate: batches grow until one takes --target_ms / 5).");
ABSL_FLAG(std::string, slot_bytes, "4M", "The shm backend's slot per rank.");
ABSL_FLAG(dtrain::base::DurationFlag, timeout,
          dtrain::base::DurationFlag(absl::Seconds(120)),
          "Bounds connecting and every collective.");

namespace dtrain::bench {
namespace {

constexpr char kName[] = "shm_allreduce_bandwidth";

struct Config {
  int processes = 0;
  std::vector<std::string> backends;
  std::vector<int64_t> sizes;
  int repeats = 0;
  double target_seconds = 0;
  int min_iters = 0;
  int max_iters = 0;
  int warmup_iters = 0;
  int64_t slot_bytes = 0;
  absl::Duration timeout;
};

// One backend's measurement of one size, agreed by all ranks.
struct Measured {
  int iters = 0;
  std::vector<double> repeat_seconds;  // slowest rank's, per allreduce
  double seconds = 0;                  // the median repeat
  // CPU time (user + system, every thread) of all ranks together per
  // allreduce, per repeat and the median: over `seconds`, how many cores the
  // ranks kept busy (at most the host's), which tells waiting that spins
  // from waiting that sleeps.
  std::vector<double> repeat_cpu_seconds;
  double cpu_seconds = 0;
  bool correct = false;
};

absl::StatusOr<Config> ConfigFromFlags() {
  Config c;
  c.processes = absl::GetFlag(FLAGS_processes);
  if (c.processes < 1 || c.processes > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("--processes=", c.processes, ": want 1 to 64"));
  }
  c.backends = absl::GetFlag(FLAGS_backends);
  if (c.backends.empty() || c.backends.size() > 2 ||
      (c.backends.size() == 2 && c.backends[0] == c.backends[1])) {
    return absl::InvalidArgumentError(
        absl::StrCat("--backends=", absl::StrJoin(c.backends, ","),
                     ": want one or two different backends"));
  }
  for (const std::string& b : c.backends) {
    if (b != "shm" && b != "shm_buffers" && b != "gloo") {
      return absl::InvalidArgumentError(
          absl::StrCat("--backends: unknown backend '", b,
                       "' (want shm, shm_buffers or gloo)"));
    }
  }
  DTRAIN_ASSIGN_OR_RETURN(
      const int64_t min_bytes,
      ParseBytes("min_bytes", absl::GetFlag(FLAGS_min_bytes)));
  DTRAIN_ASSIGN_OR_RETURN(
      const int64_t max_bytes,
      ParseBytes("max_bytes", absl::GetFlag(FLAGS_max_bytes)));
  DTRAIN_ASSIGN_OR_RETURN(
      c.sizes,
      SweepSizes(min_bytes, max_bytes, absl::GetFlag(FLAGS_step_factor)));
  DTRAIN_ASSIGN_OR_RETURN(
      c.slot_bytes, ParseBytes("slot_bytes", absl::GetFlag(FLAGS_slot_bytes)));
  // Every process holds its largest message and its slot in host memory
  // (issue #29: --max_bytes=512G was taken at its word).
  const double host_bytes =
      static_cast<double>(c.processes) *
      (static_cast<double>(max_bytes) + static_cast<double>(c.slot_bytes));
  const base::Limit memory = base::MemoryLimit();
  if (host_bytes > static_cast<double>(memory.max)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_bytes=", absl::GetFlag(FLAGS_max_bytes),
        " and --slot_bytes=", absl::GetFlag(FLAGS_slot_bytes), " for ",
        c.processes, " processes need ", host_bytes / (1 << 20),
        " MiB of host memory, more than ", memory.why));
  }
  c.repeats = absl::GetFlag(FLAGS_repeats);
  c.target_seconds = absl::GetFlag(FLAGS_target_ms) / 1e3;
  c.min_iters = absl::GetFlag(FLAGS_min_iters);
  c.max_iters = absl::GetFlag(FLAGS_max_iters);
  c.warmup_iters = absl::GetFlag(FLAGS_warmup_iters);
  c.timeout = absl::GetFlag(FLAGS_timeout).value;
  if (c.repeats < 1 || c.warmup_iters < 1 || c.min_iters < 1 ||
      c.max_iters < c.min_iters || !(c.target_seconds > 0)) {
    return absl::InvalidArgumentError(
        "want --repeats >= 1, --warmup_iters >= 1, 1 <= --min_iters <= "
        "--max_iters and --target_ms > 0");
  }
  return c;
}

absl::Status AllReduce(backend::Backend& b, const at::Tensor& t,
                       backend::ReduceOp op, absl::Duration timeout) {
  return b.AllReduce(t, op)->Wait(timeout);
}

// Each element of `values` reduced by `op` over the ranks, through `b`.
absl::StatusOr<std::vector<double>> Agree(backend::Backend& b,
                                          std::vector<double> values,
                                          backend::ReduceOp op,
                                          absl::Duration timeout) {
  at::Tensor t =
      at::from_blob(values.data(), {static_cast<int64_t>(values.size())},
                    at::kDouble)
          .clone();
  DTRAIN_RETURN_IF_ERROR(b.AllReduce(t, op, "agree")->Wait(timeout));
  const double* p = t.data_ptr<double>();
  return std::vector<double>(p, p + values.size());
}

// This process's CPU time so far, every thread.
double CpuSeconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec * 1e-6 + u.ru_stime.tv_sec +
         u.ru_stime.tv_usec * 1e-6;
}

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

// Checks one allreduce of `bytes` on every rank, in a new buffer of the
// backend's when `in_buffer`. Leaves `t` zeroed: sums of zeros stay finite
// however many iterations run.
absl::StatusOr<bool> Check(backend::Backend& b, const Config& c, int rank,
                           int64_t bytes, bool in_buffer, at::Tensor& t) {
  if (in_buffer) {
    DTRAIN_ASSIGN_OR_RETURN(t, b.AllocateBuffer(bytes / 4, at::kFloat));
    t.fill_(static_cast<float>(rank + 1));
  } else {
    t = at::full({bytes / 4}, static_cast<float>(rank + 1), at::kFloat);
  }
  const double n = c.processes;
  DTRAIN_RETURN_IF_ERROR(AllReduce(b, t, backend::ReduceOp::kSum, c.timeout));
  const bool right =
      t.eq(static_cast<float>(n * (n + 1) / 2)).all().item<bool>();
  t.zero_();
  DTRAIN_ASSIGN_OR_RETURN(
      std::vector<double> wrong,
      Agree(b, {right ? 0.0 : 1.0}, backend::ReduceOp::kMax, c.timeout));
  return wrong[0] == 0;
}

// The collective being timed, issued and waited for.
using Op = std::function<absl::Status()>;

// Warms up and picks the iteration count: batches of --warmup_iters, 4x,
// 16x, ... ops until a batch takes a fifth of --target_ms (a few cold ops
// mislead: the first after a size change fault pages in and wake sleeping
// threads). Batch times are the slowest rank's, so every rank picks the same
// count.
absl::StatusOr<int> Calibrate(backend::Backend& b, const Config& c,
                              const Op& op) {
  double per_op = 0;
  for (int64_t batch = c.warmup_iters;; batch *= 4) {
    const auto start = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < batch; ++i) DTRAIN_RETURN_IF_ERROR(op());
    DTRAIN_ASSIGN_OR_RETURN(
        std::vector<double> took,
        Agree(b, {Seconds(start)}, backend::ReduceOp::kMax, c.timeout));
    per_op = took[0] / batch;
    if (took[0] >= c.target_seconds / 5 || batch >= c.max_iters) break;
  }
  const double iters = std::ceil(c.target_seconds / per_op);
  return static_cast<int>(std::clamp(iters, static_cast<double>(c.min_iters),
                                     static_cast<double>(c.max_iters)));
}

// One timed repeat: the ranks start together (a barrier, not timed), then
// each times `m.iters` ops.
absl::Status TimeRepeat(backend::Backend& b, const Config& c, const Op& op,
                        Measured& m) {
  DTRAIN_RETURN_IF_ERROR(b.Barrier()->Wait(c.timeout));
  const double cpu_start = CpuSeconds();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < m.iters; ++i) DTRAIN_RETURN_IF_ERROR(op());
  m.repeat_seconds.push_back(Seconds(start) / m.iters);
  m.repeat_cpu_seconds.push_back((CpuSeconds() - cpu_start) / m.iters);
  return absl::OkStatus();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : (v[h - 1] + v[h]) / 2;
}

// Times ops[i] on backends[i], the repeats interleaved across backends so
// that all of them see the same load; each repeat's time is the slowest
// rank's, the result the median repeat.
absl::StatusOr<std::vector<Measured>> MeasureSideBySide(
    const std::vector<std::unique_ptr<backend::Backend>>& backends,
    const Config& c, const std::vector<Op>& ops) {
  std::vector<Measured> m(backends.size());
  for (size_t i = 0; i < backends.size(); ++i) {
    DTRAIN_ASSIGN_OR_RETURN(m[i].iters, Calibrate(*backends[i], c, ops[i]));
  }
  for (int r = 0; r < c.repeats; ++r) {
    for (size_t i = 0; i < backends.size(); ++i) {
      DTRAIN_RETURN_IF_ERROR(TimeRepeat(*backends[i], c, ops[i], m[i]));
    }
  }
  for (size_t i = 0; i < backends.size(); ++i) {
    DTRAIN_ASSIGN_OR_RETURN(m[i].repeat_seconds,
                            Agree(*backends[i], m[i].repeat_seconds,
                                  backend::ReduceOp::kMax, c.timeout));
    m[i].seconds = Median(m[i].repeat_seconds);
    DTRAIN_ASSIGN_OR_RETURN(m[i].repeat_cpu_seconds,
                            Agree(*backends[i], m[i].repeat_cpu_seconds,
                                  backend::ReduceOp::kSum, c.timeout));
    m[i].cpu_seconds = Median(m[i].repeat_cpu_seconds);
  }
  return m;
}

absl::StatusOr<std::unique_ptr<backend::Backend>> Connect(
    const std::string& name, int rank, const Config& c,
    std::shared_ptr<store::Store> store) {
  backend::Membership group;
  group.rank = rank;
  group.world_size = c.processes;
  group.store = std::move(store);
  group.timeout = c.timeout;
  if (name == "shm" || name == "shm_buffers") {
    backend::ShmBackendOptions o;
    o.slot_bytes = c.slot_bytes;
    return backend::CreateShmBackend(group, o);
  }
  backend::GlooBackendOptions o;
  o.hostname = "127.0.0.1";
  return backend::CreateGlooBackend(group, o);
}

void PrintHeader(const Config& c, int blas_threads) {
  std::printf(
      "# %s: allreduce (sum, float32) between %d processes of this host, "
      "%d intra-op thread(s) each (BLAS: %s); shm slot %lld B; gloo over "
      "loopback TCP (default algorithm); shm_buffers: shm on tensors from "
      "AllocateBuffer (zero-copy); per size the median of %d "
      "repeats of about %g ms, interleaved across backends\n",
      kName, c.processes, at::get_num_threads(),
      blas_threads < 0 ? "not OpenBLAS"
                       : absl::StrCat(blas_threads, " thread(s)").c_str(),
      static_cast<long long>(c.slot_bytes), c.repeats, c.target_seconds * 1e3);
  std::string groups = absl::StrFormat("#%13s", "");
  std::string columns = absl::StrFormat("#%13s", "bytes");
  for (const std::string& b : c.backends) {
    absl::StrAppend(&groups, absl::StrFormat(" %-53s", absl::StrCat("-- ", b)));
    absl::StrAppend(
        &columns, absl::StrFormat(" %8s %11s %11s %11s %8s", "iters", "time_us",
                                  "algbw_GBps", "busbw_GBps", "cpu/wall"));
  }
  if (c.backends.size() == 2) {
    absl::StrAppend(
        &columns, absl::StrFormat(
                      " %9s", absl::StrCat(c.backends[1], "/", c.backends[0])));
  }
  absl::StrAppend(&columns, absl::StrFormat(" %7s", "correct"));
  std::printf("%s\n%s\n", groups.c_str(), columns.c_str());
  std::fflush(stdout);
}

void PrintBarrier(const Config& c, const std::vector<Measured>& m) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < m.size(); ++i) {
    parts.push_back(absl::StrFormat(
        "%s %.2f us (%d iters, cpu/wall %.2f)", c.backends[i],
        m[i].seconds * 1e6, m[i].iters, m[i].cpu_seconds / m[i].seconds));
  }
  std::printf("# Barrier(), the latency floor: %s\n",
              absl::StrJoin(parts, ", ").c_str());
  std::fflush(stdout);
}

// Prints the row for one size; returns its JSON object.
std::string PrintRow(const Config& c, int64_t bytes,
                     const std::vector<Measured>& m) {
  std::string row = absl::StrFormat(" %13lld", static_cast<long long>(bytes));
  std::vector<std::string> json = {absl::StrCat("\"bytes\": ", bytes)};
  bool correct = true;
  for (size_t i = 0; i < m.size(); ++i) {
    const double algbw = bytes / m[i].seconds * 1e-9;
    const double busbw = algbw * AllReduceBusFactor(c.processes);
    absl::StrAppend(
        &row, absl::StrFormat(" %8d %11.2f %11.4f %11.4f %8.2f", m[i].iters,
                              m[i].seconds * 1e6, algbw, busbw,
                              m[i].cpu_seconds / m[i].seconds));
    std::vector<std::string> repeats_us;
    for (double s : m[i].repeat_seconds) {
      repeats_us.push_back(absl::StrCat(s * 1e6));
    }
    json.push_back(absl::StrCat(
        "\"", c.backends[i], "\": {\"iters\": ", m[i].iters,
        ", \"time_us\": ", m[i].seconds * 1e6, ", \"algbw_GBps\": ", algbw,
        ", \"busbw_GBps\": ", busbw, ", \"cpu_us\": ", m[i].cpu_seconds * 1e6,
        ", \"correct\": ", m[i].correct ? "true" : "false",
        ", \"repeats_us\": [", absl::StrJoin(repeats_us, ", "), "]}"));
    correct = correct && m[i].correct;
  }
  if (m.size() == 2) {
    const double ratio = m[1].seconds / m[0].seconds;
    absl::StrAppend(&row, absl::StrFormat(" %9.2f", ratio));
    json.push_back(absl::StrCat("\"ratio\": ", ratio));
  }
  absl::StrAppend(&row, absl::StrFormat(" %7s", correct ? "yes" : "NO"));
  json.push_back(absl::StrCat("\"correct\": ", correct ? "true" : "false"));
  std::printf("%s\n", row.c_str());
  std::fflush(stdout);
  return absl::StrCat("{", absl::StrJoin(json, ", "), "}");
}

// One rank's whole run. Rank 0 prints the table and the JSON line.
absl::Status RunRank(int rank, int port, const Config& c) {
  const int blas_threads = base::SetComputeThreads(1).blas;
  store::TcpStoreOptions so;
  so.host = "127.0.0.1";
  so.port = port;
  so.timeout = c.timeout;
  DTRAIN_ASSIGN_OR_RETURN(std::shared_ptr<store::TcpStore> store,
                          store::TcpStore::Create(so));
  std::vector<std::unique_ptr<backend::Backend>> backends;
  for (const std::string& name : c.backends) {
    DTRAIN_ASSIGN_OR_RETURN(std::unique_ptr<backend::Backend> b,
                            Connect(name, rank, c, store));
    backends.push_back(std::move(b));
  }
  if (rank == 0) PrintHeader(c, blas_threads);
  std::vector<std::string> json;
  std::vector<int64_t> wrong_sizes;
  std::vector<Measured> barrier;
  DTRAIN_RETURN_IF_ERROR(base::GuardTorch(
      absl::StatusCode::kInternal, "LibTorch: ", [&]() -> absl::Status {
        // The floor under the smallest allreduce: handing a collective to
        // the backend's worker thread and back, and one synchronisation.
        std::vector<Op> ops;
        for (const auto& b : backends) {
          ops.push_back(
              [&c, b = b.get()] { return b->Barrier()->Wait(c.timeout); });
        }
        DTRAIN_ASSIGN_OR_RETURN(barrier, MeasureSideBySide(backends, c, ops));
        if (rank == 0) PrintBarrier(c, barrier);
        for (int64_t bytes : c.sizes) {
          std::vector<at::Tensor> tensors(backends.size());
          std::vector<bool> correct(backends.size());
          ops.clear();
          for (size_t i = 0; i < backends.size(); ++i) {
            DTRAIN_ASSIGN_OR_RETURN(
                correct[i], Check(*backends[i], c, rank, bytes,
                                  c.backends[i] == "shm_buffers", tensors[i]));
            ops.push_back([&c, b = backends[i].get(), t = tensors[i]] {
              return AllReduce(*b, t, backend::ReduceOp::kSum, c.timeout);
            });
          }
          DTRAIN_ASSIGN_OR_RETURN(std::vector<Measured> m,
                                  MeasureSideBySide(backends, c, ops));
          for (size_t i = 0; i < backends.size(); ++i) {
            m[i].correct = correct[i];
            if (!correct[i]) wrong_sizes.push_back(bytes);
          }
          if (rank == 0) json.push_back(PrintRow(c, bytes, m));
        }
        return absl::OkStatus();
      }));
  if (rank == 0) {
    std::vector<std::string> quoted;
    std::vector<std::string> barrier_json;
    for (size_t i = 0; i < c.backends.size(); ++i) {
      quoted.push_back(absl::StrCat("\"", c.backends[i], "\""));
      barrier_json.push_back(
          absl::StrCat("\"", c.backends[i], "\": ", barrier[i].seconds * 1e6));
    }
    std::printf(
        "{\"format\": \"dtrain.shm_allreduce_bandwidth.v1\", \"processes\": "
        "%d, \"backends\": [%s], \"ratio\": \"%s\", \"barrier_us\": {%s}, "
        "\"results\": [%s]}\n",
        c.processes, absl::StrJoin(quoted, ", ").c_str(),
        c.backends.size() == 2
            ? absl::StrCat(c.backends[1], "/", c.backends[0]).c_str()
            : "",
        absl::StrJoin(barrier_json, ", ").c_str(),
        absl::StrJoin(json, ", ").c_str());
    std::fflush(stdout);
  }
  if (!wrong_sizes.empty()) {
    return absl::DataLossError(
        absl::StrCat("allreduce gave a wrong sum (want ", c.processes, " x (",
                     c.processes, " + 1) / 2 in every element) at ",
                     absl::StrJoin(wrong_sizes, ", "), " bytes"));
  }
  return absl::OkStatus();
}

// A forked rank: waits for the store's port on `port_fd`, runs, and exits
// without returning (0: done and correct, 1: failed, 4: no port).
[[noreturn]] void RankProcess(int rank, int port_fd, const Config& c) {
  // Die with the driver: a killed driver must not leave ranks behind.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  int port = 0;
  ssize_t got;
  do {
    got = read(port_fd, &port, sizeof(port));
  } while (got < 0 && errno == EINTR);
  close(port_fd);
  // A short read: the driver closed the pipe without a port (its server
  // failed, and it says so).
  if (got != static_cast<ssize_t>(sizeof(port))) _exit(4);
  int code = 0;
  {
    absl::Status s = RunRank(rank, port, c);
    if (!s.ok()) {
      std::fprintf(stderr, "%s: [rank %d] %s\n", kName, rank,
                   s.ToString().c_str());
      code = 1;
    }
  }
  std::fflush(stdout);
  std::fflush(stderr);
  // _exit: the static state forked from the driver is the driver's to
  // destroy.
  _exit(code);
}

// After one rank fails, how long the others get to notice (a backend fails
// its collectives within a second once a peer has exited) and say why
// themselves, before they are killed.
constexpr absl::Duration kGrace = absl::Seconds(5);

// Waits for every rank (pids[r] is rank r); once one fails, kills those still
// running after kGrace (they might otherwise wait for it until the timeout).
// Returns how many failed.
int WaitForRanks(const std::vector<pid_t>& pids) {
  std::vector<bool> running(pids.size(), true);
  size_t left = pids.size();
  int failed = 0;
  absl::Time kill_at = absl::InfiniteFuture();
  bool killed = false;
  while (left > 0) {
    int status = 0;
    // Blocks until the first failure (no wakeups to disturb the timing),
    // then polls for the grace period.
    const pid_t pid =
        waitpid(-1, &status, kill_at == absl::InfiniteFuture() ? 0 : WNOHANG);
    if (pid < 0 && errno != EINTR) break;
    if (pid <= 0) {
      if (!killed && absl::Now() >= kill_at) {
        for (size_t r = 0; r < pids.size(); ++r) {
          if (running[r]) kill(pids[r], SIGKILL);
        }
        std::fprintf(stderr,
                     "%s: killed the ranks still running %s after "
                     "the first failure\n",
                     kName, absl::FormatDuration(kGrace).c_str());
        killed = true;
      }
      absl::SleepFor(absl::Milliseconds(10));
      continue;
    }
    const size_t rank = std::find(pids.begin(), pids.end(), pid) - pids.begin();
    if (rank == pids.size()) continue;
    running[rank] = false;
    --left;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
    ++failed;
    kill_at = std::min(kill_at, absl::Now() + kGrace);
    if (WIFSIGNALED(status) && !killed) {
      std::fprintf(stderr, "%s: rank %zu (pid %d) was killed by signal %d\n",
                   kName, rank, pid, WTERMSIG(status));
    }
  }
  return failed;
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Allreduce of the shared-memory backend against Gloo over loopback "
      "TCP, between real processes, as nccl-tests' all_reduce_perf.\n"
      "  shm_allreduce_bandwidth [--processes=2] [--backends=shm,gloo] "
      "[--min_bytes=4] [--max_bytes=64M]");
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
  // Fork the ranks while this process is single-threaded (no LibTorch work,
  // no store server yet): a child of a multi-threaded process may find a lock
  // held forever by a thread that did not come along.
  std::fflush(stdout);
  std::vector<pid_t> pids;
  std::vector<int> port_fds;
  for (int rank = 0; rank < config->processes; ++rank) {
    int fds[2];
    if (pipe(fds) != 0) {
      std::perror("shm_allreduce_bandwidth: pipe");
      for (const int fd : port_fds) close(fd);
      WaitForRanks(pids);
      return 1;
    }
    const pid_t pid = fork();
    if (pid == 0) {
      close(fds[1]);
      for (const int fd : port_fds) close(fd);
      RankProcess(rank, fds[0], *config);
    }
    close(fds[0]);
    if (pid < 0) {
      std::perror("shm_allreduce_bandwidth: fork");
      close(fds[1]);
      for (const int fd : port_fds) close(fd);
      WaitForRanks(pids);
      return 1;
    }
    pids.push_back(pid);
    port_fds.push_back(fds[1]);
  }
  store::TcpStoreOptions so;
  so.host = so.bind_host = "127.0.0.1";
  so.port = 0;
  so.is_server = true;
  so.timeout = config->timeout;
  absl::StatusOr<std::shared_ptr<store::TcpStore>> server =
      store::TcpStore::Create(so);
  if (server.ok()) {
    const int port = (*server)->port();
    for (const int fd : port_fds) {
      if (write(fd, &port, sizeof(port)) !=
          static_cast<ssize_t>(sizeof(port))) {
        std::perror("shm_allreduce_bandwidth: write");
      }
    }
  } else {
    std::fprintf(stderr, "%s: cannot serve the store: %s\n", kName,
                 server.status().ToString().c_str());
  }
  // Without a port, the ranks read end of file and exit.
  for (const int fd : port_fds) close(fd);
  const int failed = WaitForRanks(pids);
  return server.ok() && failed == 0 ? 0 : 1;
}

}  // namespace
}  // namespace dtrain::bench

int main(int argc, char** argv) { return dtrain::bench::Main(argc, argv); }
