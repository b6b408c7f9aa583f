// Upper bounds on the knobs of the project's binaries (threads, workers,
// processes, sizes, world sizes), so that a hostile or mistyped value is
// refused with an error that names it, the bound and why, instead of
// exhausting the machine (a thread pool of 100,000 threads, 1,000 ranks until
// the OOM killer comes) or overflowing a conversion.
//
// Where the machine limits a knob, the bound comes from the machine: the cores
// this process may run on (sched_getaffinity), the processes it may start
// (/proc/sys/kernel/pid_max, RLIMIT_NPROC) and its memory (physical memory,
// lowered by a cgroup limit). Elsewhere it is a fixed cap, far above any real
// job. The bounds are generous: oversubscribing the cores a few times over is
// legitimate for loader workers and ranks, so the per-core factor is 16.
//
// Every function is thread-safe; the machine is read once per process.
#ifndef DTRAIN_BASE_MACHINE_LIMITS_H_
#define DTRAIN_BASE_MACHINE_LIMITS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace dtrain::base {

// A bound on a knob and why it is what it is, for the error that refuses a
// value beyond it: {256, "16x this machine's 16 cores"}.
struct Limit {
  int64_t max = 0;
  std::string why;
};

// Threads or processes per core that a bound allows.
inline constexpr int64_t kPerCore = 16;
// Ranks in one job: above the largest jobs run (about 10^5 GPUs), and small
// enough that per-rank arrays and products with it stay far from overflow.
inline constexpr int64_t kMaxWorldSize = int64_t{1} << 20;
// Examples in one batch of one process.
inline constexpr int64_t kMaxBatchSize = int64_t{1} << 20;

// The cores this process may run on (sched_getaffinity; at least 1).
int UsableCores();

// The memory this process may use, in bytes: physical memory, or the cgroup's
// memory limit when lower. Never 0 (a fallback of 1 GiB if unreadable).
int64_t UsableMemoryBytes();

// Threads of one process (loader workers, LibTorch's intra-op threads):
// kPerCore x UsableCores().
Limit ThreadLimit();

// Processes this machine lets this user run: /proc/sys/kernel/pid_max, or
// RLIMIT_NPROC when lower. For counts a launcher reports (LOCAL_WORLD_SIZE),
// which a CPU-bound task's few cores say nothing about.
Limit ProcessLimit();

// Processes started from here (ranks per node): kPerCore x UsableCores(),
// lowered to ProcessLimit().
Limit LocalProcessLimit();

// A buffer or data set held in memory: UsableMemoryBytes() in bytes.
Limit MemoryLimit();

// The fixed caps above, as Limits.
Limit WorldSizeLimit();
Limit BatchSizeLimit();

// OK when value <= limit.max; else kInvalidArgument
// "<name>=<value>: at most <max> (<why>)", e.g.
// "--workers=100000: at most 256 (16x this machine's 16 cores)". `name` is
// the flag with its dashes, or the environment variable.
absl::Status CheckAtMost(absl::string_view name, int64_t value,
                         const Limit& limit);

// For a floating-point size in units of `unit_bytes` (1 << 20 for MiB): OK
// when finite, > 0 and at most the memory limit, checked before any integer
// conversion; kInvalidArgument naming the value and the bound otherwise.
absl::Status CheckFiniteSize(absl::string_view name, double value,
                             double unit_bytes, absl::string_view unit);

namespace internal {

// Parses a cgroup memory limit ("max\n", "1073741824\n"); -1 for none or
// unreadable. Exposed for tests.
int64_t ParseCgroupMemoryLimit(absl::string_view text);

}  // namespace internal
}  // namespace dtrain::base

#endif  // DTRAIN_BASE_MACHINE_LIMITS_H_
