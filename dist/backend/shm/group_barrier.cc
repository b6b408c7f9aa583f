#include "dist/backend/shm/group_barrier.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <ctime>
#include <new>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"

namespace dtrain::backend::shm {
namespace {

// Spinning this long covers a peer running on another core; beyond it, the
// peer is probably waiting for a core, so give ours up. Measured with
// //bench:shm_allreduce_bandwidth (docs/PERFORMANCE.md).
constexpr absl::Duration kSpin = absl::Microseconds(50);
// Sleeps are cut into slices this long to check liveness and the deadline.
constexpr absl::Duration kSlice = absl::Milliseconds(50);

void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Shared (not FUTEX_PRIVATE) operations: the word is in memory that other
// processes map.
void FutexWait(std::atomic<uint32_t>* word, uint32_t expected,
               absl::Duration timeout) {
  const timespec ts = absl::ToTimespec(timeout);
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected,
            &ts, nullptr, 0);
}

void FutexWakeAll(std::atomic<uint32_t>* word) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX,
            nullptr, nullptr, 0);
}

}  // namespace

Control* Control::Init(void* memory) { return new (memory) Control(); }

absl::Duration GroupBarrier::DefaultSpin(int ranks) {
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  if (ranks <= 0 || ::sched_getaffinity(0, sizeof(cpus), &cpus) != 0) {
    return kSpin;
  }
  return ranks <= CPU_COUNT(&cpus) ? kSpin : absl::ZeroDuration();
}

GroupBarrier::GroupBarrier(Control* control, int rank, int size,
                           std::function<bool(int64_t)> alive,
                           absl::Duration spin)
    : control_(control),
      rank_(rank),
      size_(size),
      alive_(std::move(alive)),
      spin_(spin) {}

void GroupBarrier::Register(int64_t pid) {
  control_->ranks[rank_].pid.store(pid, std::memory_order_release);
}

void GroupBarrier::Abort() {
  uint32_t none = 0;
  control_->aborted_by.compare_exchange_strong(
      none, static_cast<uint32_t>(rank_ + 1), std::memory_order_acq_rel);
  FutexWakeAll(&control_->generation);
}

absl::Status GroupBarrier::Arrive(absl::Time deadline) {
  const uint64_t target = ++arrivals_;
  control_->ranks[rank_].arrivals.store(target, std::memory_order_release);
  const uint32_t generation =
      control_->generation.load(std::memory_order_acquire);
  if (control_->arrived.fetch_add(1, std::memory_order_acq_rel) + 1 ==
      static_cast<uint32_t>(size_)) {
    // The last to arrive opens the next generation. Reset before the
    // release: a rank that sees the new generation may arrive again at once.
    control_->arrived.store(0, std::memory_order_relaxed);
    control_->generation.fetch_add(1, std::memory_order_seq_cst);
    // A sleeper counts itself before it sleeps, and the kernel rechecks the
    // generation: either it is seen here or it does not sleep.
    if (control_->sleepers.load(std::memory_order_seq_cst) != 0) {
      FutexWakeAll(&control_->generation);
    }
    return absl::OkStatus();
  }
  if (spin_ > absl::ZeroDuration()) {
    const absl::Time until = absl::Now() + spin_;
    do {
      for (int i = 0; i < 64; ++i) {
        if (control_->generation.load(std::memory_order_acquire) !=
            generation) {
          return absl::OkStatus();
        }
        CpuRelax();
      }
    } while (absl::Now() < until);
  }
  while (control_->generation.load(std::memory_order_acquire) == generation) {
    DTRAIN_RETURN_IF_ERROR(WhyNotYet(target, deadline));
    control_->sleepers.fetch_add(1, std::memory_order_seq_cst);
    FutexWait(&control_->generation, generation,
              std::min(kSlice, deadline - absl::Now()));
    control_->sleepers.fetch_sub(1, std::memory_order_seq_cst);
  }
  return absl::OkStatus();
}

absl::Status GroupBarrier::WhyNotYet(uint64_t target,
                                     absl::Time deadline) const {
  const uint32_t aborted = control_->aborted_by.load(std::memory_order_acquire);
  if (aborted != 0) {
    return absl::AbortedError(
        absl::StrCat("rank ", aborted - 1, " gave up (see its error)"));
  }
  std::vector<int> missing;
  for (int r = 0; r < size_; ++r) {
    if (control_->ranks[r].arrivals.load(std::memory_order_acquire) >= target) {
      continue;
    }
    missing.push_back(r);
    const int64_t pid = control_->ranks[r].pid.load(std::memory_order_acquire);
    if (pid > 0 && !alive_(pid)) {
      return absl::UnavailableError(
          absl::StrCat("rank ", r, " (pid ", pid, ") has exited"));
    }
  }
  if (absl::Now() >= deadline) {
    return absl::DeadlineExceededError(absl::StrCat(
        missing.size() == 1 ? "rank " : "ranks ", absl::StrJoin(missing, ", "),
        missing.size() == 1 ? " has" : " have", " not arrived"));
  }
  return absl::OkStatus();
}

}  // namespace dtrain::backend::shm
