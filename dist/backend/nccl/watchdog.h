// The NCCL backend's in-flight collectives and the state machine that ends
// them: each one completes when its event fires; an asynchronous
// communicator error or a collective outliving the timeout aborts the
// communicator and fails everything in flight; after that every new
// collective fails at once with the first error. Destroying the backend
// (Shutdown) gives collectives still in flight a short grace and then aborts
// them, so that a rank leaving because of an error is gone in seconds rather
// than after the whole timeout.
//
// Memory a collective uses (its tensors and any scratch) is kept alive until
// the communication stream has run dry, also after an abort; if the stream
// does not drain within a bound it is never freed, since the device may
// still write it.
//
// Device-independent: the device and the communicator are reached through
// CommOps (comm_ops.h).
//
// Issuing: a non-blocking communicator connects to its peers and enqueues in
// the background (NCCL 2.22+ connects each algorithm in its first collective),
// so an enqueue may wait for a peer. It waits (Enqueuer::Settle) without
// holding the lock that Abort and the watchdog take: an abort steps in, and
// the timeout bounds it. Library calls on the communicator (Enqueuer::Call,
// the watchdog's polls, the abort) all run under that lock, so none runs on a
// communicator being aborted.
//
// Thread safety: Issue may be called from any thread (issues are serialized,
// so numbers and enqueue order follow issue order); Abort from any thread at
// any time. Shutdown once, with no Issue running; the destructor calls it if
// needed.
#ifndef DTRAIN_DIST_BACKEND_NCCL_WATCHDOG_H_
#define DTRAIN_DIST_BACKEND_NCCL_WATCHDOG_H_

#include <ATen/core/Tensor.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dist/backend/backend.h"
#include "dist/backend/collective.h"
#include "dist/backend/nccl/comm_ops.h"
#include "dist/backend/nccl/stream_work.h"

namespace dtrain::backend::nccl_internal {

struct WatchdogOptions {
  int rank = 0;
  // Longest a collective may run before the communicator is aborted.
  absl::Duration timeout = absl::Minutes(30);
  // How long Shutdown lets collectives in flight finish before aborting them.
  absl::Duration shutdown_grace = absl::Seconds(2);
  // How long to wait for the stream to drain after an abort before leaking
  // (rather than freeing) the memory its collectives used.
  absl::Duration drain_limit = absl::Seconds(10);
  // The longest pause between two polls (of an event, or of an enqueue in
  // progress); see PollPause.
  absl::Duration poll_interval = absl::Microseconds(200);
};

// The pause before poll `n` (0, 1, ...) of something expected to finish
// soon: none (a yield) for the first kPollYields polls, since a
// non-blocking enqueue usually settles within microseconds and every
// microsecond here stalls the thread issuing (autograd's, for DDP buckets);
// then sleeps doubling from 10 us up to `longest`.
constexpr int kPollYields = 64;
absl::Duration PollPause(int n, absl::Duration longest);
// Pauses before poll `n`: yields the thread or sleeps, as PollPause says.
void PauseBeforePoll(int n, absl::Duration longest);

class Watchdog;

// What an enqueue uses to touch the communicator (see "Issuing" above).
class Enqueuer {
 public:
  // Runs `call` (one library call on the communicator; it returns at once on
  // a non-blocking one) under the watchdog's lock, so never while the
  // communicator is being aborted; fails without calling it once aborted.
  absl::Status Call(const std::function<absl::Status()>& call);

  // Waits until what was called so far is enqueued, polling CommOps::Settled
  // (PollPause between polls) without holding the lock. Fails with the
  // abort's reason once aborted, with the library's error, or with
  // kUnavailable "... still in progress at the timeout" when the collective's
  // timeout passes first.
  absl::Status Settle();

  // Keeps `t` alive until the communication stream has run dry: memory the
  // device may touch once anything was queued. Kept also when the enqueue
  // fails, since part of it may be on the stream already.
  void Keep(at::Tensor t) { kept_.push_back(std::move(t)); }

 private:
  friend class Watchdog;
  Enqueuer(Watchdog* w, std::string who, absl::Time start)
      : w_(w), who_(std::move(who)), start_(start) {}
  Watchdog* const w_;
  const std::string who_;
  const absl::Time start_;
  std::vector<at::Tensor> kept_;
};

class Watchdog {
 public:
  // Starts the watchdog thread. `ops` must outlive the object.
  Watchdog(const WatchdogOptions& options, CommOps* ops);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // What an enqueue hands over: the event recorded after the collective, and
  // the tensors the device uses until it has run (besides those given to
  // Enqueuer::Keep).
  struct Enqueued {
    std::shared_ptr<void> event;
    std::vector<at::Tensor> keep_alive;
  };
  using Enqueue = std::function<absl::StatusOr<Enqueued>(const std::string& who,
                                                         Enqueuer& enqueuer)>;

  // Numbers the collective, runs `enqueue` (which puts it on the device
  // through `enqueuer`; `who` is "[rank R] nccl allreduce #N (...)" for its
  // messages) and tracks it. A failed enqueue aborts the communicator, since
  // NCCL may have queued part of it. Returns the collective's Work, already
  // failed when the backend is broken or the enqueue failed.
  std::shared_ptr<Work> Issue(const internal::Description& description,
                              WorkKind kind, const Enqueue& enqueue);

  // Completes what has finished, lets the rest run for the shutdown grace,
  // then aborts it (its Works fail) and stops the thread. True when the
  // communicator was never aborted, so it may be finalized normally.
  bool Shutdown();

  // The first error, or OK while healthy.
  absl::Status broken();

  // Aborts the communicator for `reason` (Backend::Abort; an OK reason counts
  // as "aborted"): what is in flight fails ("not completed: <reason>"), later
  // collectives fail at once, and Shutdown will not finalize. No effect once
  // aborted.
  void Abort(const absl::Status& reason);

 private:
  struct Pending {
    std::shared_ptr<StreamWork> work;
    std::shared_ptr<void> event;
    absl::Time start;
    std::string what;
    std::vector<at::Tensor> keep_alive;
    int64_t flight_ticket = -1;  // FlightRecorder::Process()'s.
  };

  void Run();
  // Polls the oldest collective: completes it, fails it (and aborts), or
  // returns false when it is still running normally. Requires mu_.
  bool PollFront();
  // Aborts the communicator, fails everything in flight with `status` (as is
  // for the oldest when it is the culprit, else "not completed") and releases
  // their memory once the stream has drained. Requires mu_.
  void AbortLocked(const absl::Status& status, bool front_is_culprit);
  // Frees `memory` once the communication stream has run dry, or never when
  // it does not drain within the drain limit. Requires mu_.
  void ReleaseWhenDrained(std::vector<at::Tensor> memory);
  std::string Who(const std::string& what) const;

  friend class Enqueuer;

  const WatchdogOptions options_;
  CommOps* const ops_;
  const int flight_instance_;  // FlightRecorder::NextInstance's.

  std::mutex issue_mu_;  // Held through an Issue; before mu_.
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> pending_;
  absl::Status broken_;
  bool aborted_ = false;
  bool stop_ = false;
  bool shut_down_ = false;
  int64_t seq_ = 0;

  std::thread thread_;  // Last: starts once everything above exists.
};

}  // namespace dtrain::backend::nccl_internal

#endif  // DTRAIN_DIST_BACKEND_NCCL_WATCHDOG_H_
