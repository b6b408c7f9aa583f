// The one synchronisation the shared-memory collectives need: a barrier among
// the processes (or threads) of one host that share a Control block. Waiting
// spins briefly, then sleeps on a futex, so that ranks outnumbering the cores
// do not take CPU time from training. A wait that cannot end says why and
// who: a peer that has exited (checked while waiting, so within a fraction of
// a second), a peer that gave up (Abort), or the deadline, naming the ranks
// that have not arrived.
//
// Thread safety: each rank's GroupBarrier is used by one thread at a time;
// ranks run concurrently by design. The Control block lives in shared memory,
// constructed once by its creator (Control::Init) before any rank uses it.
#ifndef DTRAIN_DIST_BACKEND_SHM_GROUP_BARRIER_H_
#define DTRAIN_DIST_BACKEND_SHM_GROUP_BARRIER_H_

#include <atomic>
#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace dtrain::backend::shm {

inline constexpr int kMaxLocalRanks = 256;

// Shared memory layout; only lock-free atomics, which work across processes.
struct Control {
  struct alignas(64) Rank {
    std::atomic<uint64_t> arrivals;  // barriers this rank has arrived at
    std::atomic<int64_t> pid;
  };
  alignas(64) std::atomic<uint32_t> generation;  // the futex word
  alignas(64) std::atomic<uint32_t> arrived;
  alignas(64) std::atomic<uint32_t> aborted_by;  // 0, or 1 + the rank
  std::atomic<uint32_t> sleepers;                // ranks inside a futex wait
  Rank ranks[kMaxLocalRanks];

  // Constructs the block in place in zeroed shared memory.
  static Control* Init(void* memory);
};

class GroupBarrier {
 public:
  // `alive(pid)` says whether a peer's process still exists. `spin` is how
  // long a waiter polls before it sleeps; zero when the ranks outnumber the
  // cores, since the rank being waited for then needs this core.
  GroupBarrier(Control* control, int rank, int size,
               std::function<bool(int64_t pid)> alive,
               absl::Duration spin = DefaultSpin(0));

  // 50 us when `ranks` fit on the cores this process may run on, else 0
  // (`ranks` = 0: assume they fit).
  static absl::Duration DefaultSpin(int ranks);

  // Records this rank's process id for the others' liveness checks.
  void Register(int64_t pid);

  // Returns once every rank has arrived. kUnavailable when a peer exited
  // ("rank 1 (pid 4242) has exited"), kAborted when a peer gave up,
  // kDeadlineExceeded at `deadline` ("ranks 1, 3 have not arrived"). After a
  // failure the group is unusable.
  absl::Status Arrive(absl::Time deadline);

  // Tells every rank that this one gave up, waking those that wait. Unlike
  // the rest, callable from any thread.
  void Abort();

 private:
  absl::Status WhyNotYet(uint64_t target, absl::Time deadline) const;

  Control* const control_;
  const int rank_;
  const int size_;
  const std::function<bool(int64_t)> alive_;
  const absl::Duration spin_;
  uint64_t arrivals_ = 0;
};

}  // namespace dtrain::backend::shm

#endif  // DTRAIN_DIST_BACKEND_SHM_GROUP_BARRIER_H_
