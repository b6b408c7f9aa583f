// shm_allreduce_bandwidth: allreduce, reduce_scatter and allgather of the
// shared-memory backend against Gloo over loopback TCP, between real
// processes of this host, as nccl-tests' all_reduce_perf, reduce_scatter_perf
// and all_gather_perf measure them (issues #15 and #34). The ranks are forked
// before the driver touches LibTorch (forked_ranks.h); each computes on one
// intra-op thread (so 4 ranks on 2 cores are not oversubscribed by LibTorch)
// and connects a backend for each column: each backend of --backends with
// each collective of --collectives (two columns at most). For each message
// size, each column's result is checked once (rank r contributes r + 1: a
// reduced element must be n(n+1)/2, rank r's gathered share r + 1), untimed
// batches warm up and pick the iteration count (about --target_ms per
// repeat, at least --min_iters), then the repeats run interleaved across
// columns, so that the ratio between them is measured under the same load. A
// repeat's time is the slowest rank's; the table shows the median repeat.
// Before the sizes, Barrier() is timed the same way: the latency floor of
// each backend (handing a collective to its worker thread and back, and one
// synchronisation). Rank 0 prints. The backend "two_hosts" is the
// hierarchical backend with the processes split over two simulated hosts
// (the first half on one): shared memory within each, Gloo over loopback
// between the two leaders. The backends "shm_buffers" and
// "two_hosts_buffers" are those two on tensors from AllocateBuffer (one per
// size and column), which take the zero-copy paths; there reduce_scatter's
// output and allgather's input are the rank's own share of the buffer, as a
// sharded optimizer has them. A size is the bytes of allreduce's tensor,
// reduce_scatter's input and allgather's output alike.
//
//   bazel run //bench:shm_allreduce_bandwidth -- --processes=2
//   bazel run //bench:shm_allreduce_bandwidth -- --processes=4 --max_bytes=1M
//   bazel run //bench:shm_allreduce_bandwidth -- --backends=shm,shm_buffers
//   bazel run //bench:shm_allreduce_bandwidth -- --backends=shm_buffers
//       --collectives=allreduce,reduce_scatter
//   bazel run //bench:shm_allreduce_bandwidth -- --processes=4
//       --backends=two_hosts --collectives=allreduce,reduce_scatter
//
// Prints a table (algbw = bytes / time; busbw = algbw * 2(n-1)/n for
// allreduce, (n-1)/n for the others; the last column is the second column's
// time over the first's, "gloo/shm" by default; cpu/wall is the CPU time all
// ranks spent per collective over its time, so at most the host's cores:
// near that, the ranks' waiting spins), then one JSON line, the last line of
// stdout (the columns are named by backend, or "backend:collective" when
// --collectives names two):
//   {"format": "dtrain.shm_allreduce_bandwidth.v1", "processes": 2,
//    "collectives": ["allreduce"], "backends": ["shm", "gloo"],
//    "ratio": "gloo/shm", "barrier_us": {"shm": 8.3, "gloo": 190.2},
//    "results": [{"bytes": 4, "correct": true, "ratio": 6.1,
//                 "shm": {"iters": 9000, "time_us": 4.1, "algbw_GBps": ...,
//                         "busbw_GBps": ..., "cpu_us": 7.9,
//                         "correct": true, "repeats_us": [...]},
//                 "gloo": {...}}, ...]}
// Exits 0 when every size was correct in every column; 1 with the reason on
// stderr when a rank failed or a result was wrong; 2 for bad flags.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <sys/resource.h>

#include <algorithm>
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
#include "absl/strings/match.h"
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
#include "bench/forked_ranks.h"
#include "bench/sweep.h"
#include "dist/backend/backend.h"
#include "dist/backend/gloo/gloo_backend.h"
#include "dist/backend/hierarchical/hierarchical_backend.h"
#include "dist/backend/shm/shm_backend.h"
#include "dist/store/tcp_store.h"

ABSL_FLAG(int, processes, 2, "Ranks, each a process of its own.");
ABSL_FLAG(std::vector<std::string>, backends,
          std::vector<std::string>({"shm", "gloo"}),
          "Backends to measure side by side (shm, shm_buffers: shm on its "
          "own buffers, gloo, two_hosts: the hierarchical backend over two "
          "simulated hosts, two_hosts_buffers: the same on its own buffers); "
          "with two, the last column is the second's "
          "time over the first's.");
ABSL_FLAG(std::vector<std::string>, collectives,
          std::vector<std::string>({"allreduce"}),
          "Collectives to measure (allreduce, reduce_scatter, allgather); "
          "with two, on one backend, the last column is the second's time "
          "over the first's at the same bytes (reduce_scatter's input, "
          "allgather's output).");
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

// One column of the table: a collective on a backend.
struct Column {
  std::string backend;     // shm, shm_buffers, gloo
  std::string collective;  // allreduce, reduce_scatter, allgather
  std::string label;       // the backend, or "backend:collective"
};

struct Config {
  int processes = 0;
  std::vector<std::string> backends;
  std::vector<std::string> collectives;
  std::vector<Column> columns;
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
  c.collectives = absl::GetFlag(FLAGS_collectives);
  if (c.backends.empty() || c.backends.size() > 2 ||
      (c.backends.size() == 2 && c.backends[0] == c.backends[1])) {
    return absl::InvalidArgumentError(
        absl::StrCat("--backends=", absl::StrJoin(c.backends, ","),
                     ": want one or two different backends"));
  }
  if (c.collectives.empty() || c.collectives.size() > 2 ||
      (c.collectives.size() == 2 &&
       (c.collectives[0] == c.collectives[1] || c.backends.size() == 2))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--collectives=", absl::StrJoin(c.collectives, ","),
        ": want one collective, or two different ones on one backend"));
  }
  for (const std::string& op : c.collectives) {
    if (op != "allreduce" && op != "reduce_scatter" && op != "allgather") {
      return absl::InvalidArgumentError(
          absl::StrCat("--collectives: unknown collective '", op,
                       "' (want allreduce, reduce_scatter or allgather)"));
    }
  }
  for (const std::string& b : c.backends) {
    for (const std::string& op : c.collectives) {
      c.columns.push_back(
          {b, op, c.collectives.size() == 1 ? b : absl::StrCat(b, ":", op)});
    }
  }
  for (const std::string& b : c.backends) {
    if (b != "shm" && b != "shm_buffers" && b != "gloo" && b != "two_hosts" &&
        b != "two_hosts_buffers") {
      return absl::InvalidArgumentError(absl::StrCat(
          "--backends: unknown backend '", b,
          "' (want shm, shm_buffers, gloo, two_hosts or two_hosts_buffers)"));
    }
    if (absl::StartsWith(b, "two_hosts") && c.processes < 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--backends=", b, ": needs --processes=2 or more, one host each"));
    }
  }
  DTRAIN_ASSIGN_OR_RETURN(
      const int64_t min_bytes,
      ParseBytes("min_bytes", absl::GetFlag(FLAGS_min_bytes)));
  DTRAIN_ASSIGN_OR_RETURN(
      const int64_t max_bytes,
      ParseBytes("max_bytes", absl::GetFlag(FLAGS_max_bytes)));
  DTRAIN_ASSIGN_OR_RETURN(
      std::vector<int64_t> sizes,
      SweepSizes(min_bytes, max_bytes, absl::GetFlag(FLAGS_step_factor)));
  // reduce_scatter and allgather split the bytes into a share per rank of
  // whole float32 elements: sizes round down to a multiple of 4 x processes.
  const int64_t unit = c.collectives == std::vector<std::string>{"allreduce"}
                           ? 4
                           : 4 * c.processes;
  for (const int64_t bytes : sizes) {
    const int64_t rounded = bytes / unit * unit;
    if (rounded > 0 && (c.sizes.empty() || c.sizes.back() != rounded)) {
      c.sizes.push_back(rounded);
    }
  }
  if (c.sizes.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_bytes=", absl::GetFlag(FLAGS_max_bytes), ": no size holds ",
        unit, " bytes (a float32 element per rank)"));
  }
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

// The collective being timed, issued and waited for.
using Op = std::function<absl::Status()>;

// A column's collective of `bytes`, ready to time: its tensors in a new
// buffer of the backend's for shm_buffers (reduce_scatter's output and
// allgather's input are then the rank's own share, in place, as a sharded
// optimizer has them), and whether every rank's first result was right.
// The tensors are left zeroed: sums of zeros stay finite however many
// iterations run.
struct Prepared {
  Op op;
  bool correct = false;
};

absl::StatusOr<Prepared> Prepare(backend::Backend& b, const Config& c,
                                 const Column& column, int rank,
                                 int64_t bytes) {
  const int64_t numel = bytes / 4;
  at::Tensor t;
  const bool in_place = absl::EndsWith(column.backend, "_buffers");
  if (in_place) {
    DTRAIN_ASSIGN_OR_RETURN(t, b.AllocateBuffer(numel, at::kFloat));
  } else {
    t = at::empty({numel}, at::kFloat);
  }
  const int p = c.processes;
  const float sum = p * (p + 1) / 2.0f;
  std::vector<at::Tensor> shares;
  for (int r = 0; r < p && column.collective != "allreduce"; ++r) {
    shares.push_back(t.narrow(0, r * (numel / p), numel / p));
  }
  Prepared out;
  bool right = false;
  if (column.collective == "allreduce") {
    t.fill_(static_cast<float>(rank + 1));
    out.op = [&b, &c, t] { return b.AllReduce(t)->Wait(c.timeout); };
    DTRAIN_RETURN_IF_ERROR(out.op());
    right = t.eq(sum).all().item<bool>();
    t.zero_();
  } else if (column.collective == "reduce_scatter") {
    t.fill_(static_cast<float>(rank + 1));
    at::Tensor mine = in_place ? shares[rank] : at::empty_like(shares[rank]);
    out.op = [&b, &c, mine, shares] {
      return b.ReduceScatter(mine, shares)->Wait(c.timeout);
    };
    DTRAIN_RETURN_IF_ERROR(out.op());
    right = mine.eq(sum).all().item<bool>();
    t.zero_();
    mine.zero_();
  } else {
    at::Tensor mine = in_place ? shares[rank] : at::empty_like(shares[rank]);
    mine.fill_(static_cast<float>(rank + 1));
    out.op = [&b, &c, mine, shares] {
      return b.AllGather(shares, mine)->Wait(c.timeout);
    };
    DTRAIN_RETURN_IF_ERROR(out.op());
    right = true;
    for (int r = 0; r < p; ++r) {
      right =
          right && shares[r].eq(static_cast<float>(r + 1)).all().item<bool>();
    }
    t.zero_();
    mine.zero_();
  }
  DTRAIN_ASSIGN_OR_RETURN(
      std::vector<double> wrong,
      Agree(b, {right ? 0.0 : 1.0}, backend::ReduceOp::kMax, c.timeout));
  out.correct = wrong[0] == 0;
  return out;
}

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
  if (name == "two_hosts" || name == "two_hosts_buffers") {
    backend::HierarchicalBackendOptions o;
    o.gloo.hostname = "127.0.0.1";
    o.shm_slot_bytes = c.slot_bytes;
    o.host_key = rank < (c.processes + 1) / 2 ? "host a" : "host b";
    return backend::CreateHierarchicalBackend(group, o);
  }
  backend::GlooBackendOptions o;
  o.hostname = "127.0.0.1";
  return backend::CreateGlooBackend(group, o);
}

// busbw = algbw * this: what each rank's link carries in a ring, as
// nccl-tests define it (reduce_scatter and allgather move (n-1)/n of the
// bytes, allreduce twice that).
double BusFactor(const std::string& collective, int processes) {
  return collective == "allreduce" ? AllReduceBusFactor(processes)
                                   : AllReduceBusFactor(processes) / 2;
}

std::string Ratio(const Config& c) {
  return c.columns.size() == 2
             ? absl::StrCat(c.columns[1].label, "/", c.columns[0].label)
             : "";
}

void PrintHeader(const Config& c, int blas_threads) {
  std::printf(
      "# %s: %s (sum, float32) between %d processes of this host, "
      "%d intra-op thread(s) each (BLAS: %s); shm slot %lld B; gloo over "
      "loopback TCP (default algorithm); shm_buffers: shm on tensors from "
      "AllocateBuffer (zero-copy); two_hosts: hierarchical, half the "
      "processes on each of two simulated hosts (two_hosts_buffers: on "
      "tensors from AllocateBuffer); per size the median of %d "
      "repeats of about %g ms, interleaved across backends\n",
      kName, absl::StrJoin(c.collectives, " and ").c_str(), c.processes,
      at::get_num_threads(),
      blas_threads < 0 ? "not OpenBLAS"
                       : absl::StrCat(blas_threads, " thread(s)").c_str(),
      static_cast<long long>(c.slot_bytes), c.repeats, c.target_seconds * 1e3);
  std::string groups = absl::StrFormat("#%13s", "");
  std::string columns = absl::StrFormat("#%13s", "bytes");
  for (const Column& column : c.columns) {
    absl::StrAppend(
        &groups, absl::StrFormat(" %-53s", absl::StrCat("-- ", column.label)));
    absl::StrAppend(
        &columns, absl::StrFormat(" %8s %11s %11s %11s %8s", "iters", "time_us",
                                  "algbw_GBps", "busbw_GBps", "cpu/wall"));
  }
  if (c.columns.size() == 2) {
    absl::StrAppend(&columns, absl::StrFormat(" %9s", Ratio(c)));
  }
  absl::StrAppend(&columns, absl::StrFormat(" %7s", "correct"));
  std::printf("%s\n%s\n", groups.c_str(), columns.c_str());
  std::fflush(stdout);
}

void PrintBarrier(const Config& c, const std::vector<Measured>& m) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < m.size(); ++i) {
    parts.push_back(absl::StrFormat(
        "%s %.2f us (%d iters, cpu/wall %.2f)", c.columns[i].label,
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
    const double busbw =
        algbw * BusFactor(c.columns[i].collective, c.processes);
    absl::StrAppend(
        &row, absl::StrFormat(" %8d %11.2f %11.4f %11.4f %8.2f", m[i].iters,
                              m[i].seconds * 1e6, algbw, busbw,
                              m[i].cpu_seconds / m[i].seconds));
    std::vector<std::string> repeats_us;
    for (double s : m[i].repeat_seconds) {
      repeats_us.push_back(absl::StrCat(s * 1e6));
    }
    json.push_back(absl::StrCat(
        "\"", c.columns[i].label, "\": {\"iters\": ", m[i].iters,
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
  for (const Column& column : c.columns) {
    DTRAIN_ASSIGN_OR_RETURN(std::unique_ptr<backend::Backend> b,
                            Connect(column.backend, rank, c, store));
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
          std::vector<bool> correct(backends.size());
          ops.clear();
          for (size_t i = 0; i < backends.size(); ++i) {
            DTRAIN_ASSIGN_OR_RETURN(
                Prepared p,
                Prepare(*backends[i], c, c.columns[i], rank, bytes));
            correct[i] = p.correct;
            ops.push_back(std::move(p.op));
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
    std::vector<std::string> collectives;
    for (const std::string& op : c.collectives) {
      collectives.push_back(absl::StrCat("\"", op, "\""));
    }
    for (size_t i = 0; i < c.columns.size(); ++i) {
      quoted.push_back(absl::StrCat("\"", c.columns[i].label, "\""));
      barrier_json.push_back(absl::StrCat("\"", c.columns[i].label,
                                          "\": ", barrier[i].seconds * 1e6));
    }
    std::printf(
        "{\"format\": \"dtrain.shm_allreduce_bandwidth.v1\", \"processes\": "
        "%d, \"collectives\": [%s], \"backends\": [%s], \"ratio\": \"%s\", "
        "\"barrier_us\": {%s}, \"results\": [%s]}\n",
        c.processes, absl::StrJoin(collectives, ", ").c_str(),
        absl::StrJoin(quoted, ", ").c_str(), Ratio(c).c_str(),
        absl::StrJoin(barrier_json, ", ").c_str(),
        absl::StrJoin(json, ", ").c_str());
    std::fflush(stdout);
  }
  if (!wrong_sizes.empty()) {
    return absl::DataLossError(absl::StrCat(
        absl::StrJoin(c.collectives, " or "), " gave a wrong result (want ",
        c.processes, " x (", c.processes,
        " + 1) / 2 in every reduced element, rank r's r + 1 in its gathered "
        "share) at ",
        absl::StrJoin(wrong_sizes, ", "), " bytes"));
  }
  return absl::OkStatus();
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
  const Config c = *config;
  return RunForkedRanks(
      kName, c.processes, c.timeout,
      [&c](int rank, int port) { return RunRank(rank, port, c); });
}

}  // namespace
}  // namespace dtrain::bench

int main(int argc, char** argv) { return dtrain::bench::Main(argc, argv); }
