#include "dist/backend/nccl/watchdog.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "dist/backend/describe.h"
#include "dist/backend/flight_recorder.h"

namespace dtrain::backend::nccl_internal {
namespace {

// Memory a stream that never drained may still write: kept for the life of
// the process (reachable, so leak checkers do not report it).
void Bury(std::vector<at::Tensor> memory) {
  static std::mutex mu;
  static auto* graveyard = new std::vector<at::Tensor>();
  std::lock_guard<std::mutex> lock(mu);
  for (at::Tensor& t : memory) graveyard->push_back(std::move(t));
}

}  // namespace

absl::Duration PollPause(int n, absl::Duration longest) {
  if (n < kPollYields) return absl::ZeroDuration();
  const int doublings = std::min(n - kPollYields, 16);
  return std::min(absl::Microseconds(10) * (1 << doublings), longest);
}

void PauseBeforePoll(int n, absl::Duration longest) {
  const absl::Duration pause = PollPause(n, longest);
  if (pause == absl::ZeroDuration()) {
    std::this_thread::yield();
  } else {
    absl::SleepFor(pause);
  }
}

absl::Status Enqueuer::Call(const std::function<absl::Status()>& call) {
  std::lock_guard<std::mutex> lock(w_->mu_);
  if (w_->aborted_) {
    return absl::Status(
        w_->broken_.code(),
        absl::StrCat(who_, " not started: ", w_->broken_.message()));
  }
  return call();
}

absl::Status Enqueuer::Settle() {
  const absl::Time deadline = start_ + w_->options_.timeout;
  for (int n = 0;; ++n) {
    {
      std::lock_guard<std::mutex> lock(w_->mu_);
      if (w_->aborted_) {
        return absl::Status(
            w_->broken_.code(),
            absl::StrCat(who_, " not started: ", w_->broken_.message()));
      }
      std::string error;
      switch (w_->ops_->Settled(&error)) {
        case CommOps::EventState::kDone:
          return absl::OkStatus();
        case CommOps::EventState::kFailed:
          return absl::UnavailableError(
              absl::StrCat(who_, " failed to start after ",
                           FormatElapsed(absl::Now() - start_), ": ", error));
        case CommOps::EventState::kPending:
          break;
      }
    }
    if (absl::Now() > deadline) {
      const std::string lost = w_->ops_->LostPeers();
      return absl::DeadlineExceededError(absl::StrCat(
          who_, " failed to start after ", FormatElapsed(absl::Now() - start_),
          ": still in progress at the timeout (",
          absl::FormatDuration(w_->options_.timeout), "): ",
          lost.empty() ? "a peer never issued it, died, or is stuck" : lost));
    }
    PauseBeforePoll(n, w_->options_.poll_interval);
  }
}

Watchdog::Watchdog(const WatchdogOptions& options, CommOps* ops)
    : options_(options),
      ops_(ops),
      flight_instance_(
          FlightRecorder::Process().NextInstance("nccl", options.rank)),
      thread_([this] { Run(); }) {}

Watchdog::~Watchdog() { Shutdown(); }

std::string Watchdog::Who(const std::string& what) const {
  return absl::StrCat("[rank ", options_.rank, "] nccl ", what);
}

absl::Status Watchdog::broken() {
  std::lock_guard<std::mutex> lock(mu_);
  return broken_;
}

void Watchdog::Abort(const absl::Status& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  // An OK reason would make everything aborted look successful.
  if (!aborted_) {
    AbortLocked(reason.ok() ? absl::AbortedError("aborted") : reason,
                /*front_is_culprit=*/false);
  }
}

std::shared_ptr<Work> Watchdog::Issue(const internal::Description& description,
                                      WorkKind kind, const Enqueue& enqueue) {
  std::lock_guard<std::mutex> issuing(issue_mu_);
  std::string what;
  std::string who;
  FlightRecorder& recorder = FlightRecorder::Process();
  int64_t ticket = -1;
  {
    std::lock_guard<std::mutex> lock(mu_);
    what = internal::Describe(description, ++seq_);
    who = Who(what);
    ticket = recorder.Issued("nccl", flight_instance_, options_.rank, seq_,
                             description.op, description.details);
    absl::Status refused;
    if (!broken_.ok()) {
      refused = absl::Status(
          broken_.code(), absl::StrCat(who, " not run: ", broken_.message()));
    } else if (shut_down_) {
      refused = absl::FailedPreconditionError(
          absl::StrCat(who, " not run: the backend is being destroyed"));
    }
    if (!refused.ok()) {
      recorder.Finished(ticket, refused);
      return internal::CompletionWork::Failed(refused);
    }
  }
  // Not under mu_: the enqueue may wait for a peer (Enqueuer::Settle).
  const absl::Time start = absl::Now();
  Enqueuer enqueuer(this, who, start);
  absl::StatusOr<Enqueued> enqueued = enqueue(who, enqueuer);
  std::vector<at::Tensor> memory = std::move(enqueuer.kept_);
  if (enqueued.ok()) {
    for (at::Tensor& t : enqueued->keep_alive) memory.push_back(std::move(t));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!enqueued.ok()) {
    // Part of it may be on the stream: abort, and free its memory only once
    // the stream has run dry.
    if (!aborted_) AbortLocked(enqueued.status(), /*front_is_culprit=*/false);
    ReleaseWhenDrained(std::move(memory));
    recorder.Finished(ticket, enqueued.status());
    return internal::CompletionWork::Failed(enqueued.status());
  }
  if (aborted_) {
    // Aborted while it was enqueued: it may never run, but the device may
    // still touch its memory.
    ReleaseWhenDrained(std::move(memory));
    const absl::Status not_completed(
        broken_.code(),
        absl::StrCat(who, " not completed: ", broken_.message()));
    recorder.Finished(ticket, not_completed);
    return internal::CompletionWork::Failed(not_completed);
  }
  // On the stream: as far as the host can tell, it has started.
  recorder.Started(ticket);
  auto work = std::make_shared<StreamWork>(who, kind, enqueued->event, ops_);
  pending_.push_back(Pending{work, std::move(enqueued->event), start, what,
                             std::move(memory), ticket});
  cv_.notify_all();
  return work;
}

bool Watchdog::PollFront() {
  Pending& p = pending_.front();
  std::string error;
  const CommOps::EventState state = ops_->Query(p.event.get(), &error);
  if (state == CommOps::EventState::kDone) {
    FlightRecorder::Process().Finished(p.flight_ticket, absl::OkStatus());
    p.work->Complete(absl::OkStatus());
    pending_.pop_front();  // The stream is past it: its memory may go.
    return true;
  }
  const std::string who = Who(p.what);
  const std::string elapsed = FormatElapsed(absl::Now() - p.start);
  absl::Status failure;
  if (state == CommOps::EventState::kFailed) {
    failure = absl::InternalError(
        absl::StrCat(who, " failed after ", elapsed, ": ", error));
  } else if (const std::string async = ops_->AsyncError(); !async.empty()) {
    const std::string lost = ops_->LostPeers();
    failure = absl::UnavailableError(absl::StrCat(
        who, " failed after ", elapsed, ": ", async,
        lost.empty() ? " (a peer may have died or lost its connection)"
                     : absl::StrCat(" (", lost, ")")));
  } else if (absl::Now() - p.start > options_.timeout) {
    const std::string lost = ops_->LostPeers();
    failure = absl::DeadlineExceededError(absl::StrCat(
        who, " timed out after ", elapsed, " (timeout ",
        absl::FormatDuration(options_.timeout), "): ",
        lost.empty() ? "a peer never issued it, died, or is stuck" : lost,
        "; the communicator was aborted"));
  } else {
    return false;
  }
  AbortLocked(failure, /*front_is_culprit=*/true);
  return true;
}

void Watchdog::AbortLocked(const absl::Status& status, bool front_is_culprit) {
  if (broken_.ok()) broken_ = status;
  if (!aborted_) {
    aborted_ = true;
    ops_->Abort();
  }
  std::vector<at::Tensor> memory;
  bool first = true;
  for (Pending& p : pending_) {
    const absl::Status ended =
        first && front_is_culprit
            ? status
            : absl::Status(status.code(),
                           absl::StrCat(Who(p.what),
                                        " not completed: ", status.message()));
    FlightRecorder::Process().Finished(p.flight_ticket, ended);
    p.work->Complete(ended);
    first = false;
    for (at::Tensor& t : p.keep_alive) memory.push_back(std::move(t));
  }
  pending_.clear();
  ReleaseWhenDrained(std::move(memory));
}

void Watchdog::ReleaseWhenDrained(std::vector<at::Tensor> memory) {
  // The aborted kernels and any copies queued after them may still touch
  // this memory: free it only once the stream has run dry.
  const absl::Time deadline = absl::Now() + options_.drain_limit;
  while (!memory.empty() && !ops_->StreamIdle()) {
    if (absl::Now() > deadline) {
      Bury(std::move(memory));
      return;
    }
    absl::SleepFor(options_.poll_interval);
  }
}

void Watchdog::Run() {
  ops_->BindThread();
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (pending_.empty()) {
      cv_.wait(lock, [this] { return stop_ || !pending_.empty(); });
      continue;
    }
    if (PollFront()) continue;
    // Never sleep holding the lock: issuing must not wait for a collective.
    lock.unlock();
    absl::SleepFor(options_.poll_interval);
    lock.lock();
  }
}

bool Watchdog::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) return !aborted_;
    shut_down_ = true;
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  std::unique_lock<std::mutex> lock(mu_);
  const absl::Time deadline = absl::Now() + options_.shutdown_grace;
  while (!pending_.empty()) {
    if (PollFront()) continue;
    if (absl::Now() >= deadline) {
      const Pending& p = pending_.front();
      AbortLocked(
          absl::AbortedError(absl::StrCat(
              Who(p.what), " was still running when the backend was destroyed ",
              FormatElapsed(absl::Now() - p.start),
              " after it started; the communicator was aborted")),
          /*front_is_culprit=*/true);
      break;
    }
    lock.unlock();
    absl::SleepFor(options_.poll_interval);
    lock.lock();
  }
  return !aborted_;
}

}  // namespace dtrain::backend::nccl_internal
