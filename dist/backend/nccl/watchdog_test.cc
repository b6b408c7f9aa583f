// The NCCL backend's completion and abort state machine and its Wait policy,
// on any machine: the device and the communicator are a scripted CommOps
// whose events fire when the test says so.

#include "dist/backend/nccl/watchdog.h"

#include <ATen/ATen.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "dist/backend/flight_recorder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::backend::nccl_internal {
namespace {

using ::testing::HasSubstr;

enum : int { kPending = 0, kDone = 1, kFailed = 2 };

class ScriptedOps : public CommOps {
 public:
  EventState Query(void* event, std::string* error) override {
    switch (static_cast<std::atomic<int>*>(event)->load()) {
      case kDone:
        return EventState::kDone;
      case kFailed:
        *error = "cudaErrorLaunchFailure (unspecified launch failure)";
        return EventState::kFailed;
      default:
        return EventState::kPending;
    }
  }
  EventState Settled(std::string* error) override {
    ++settle_polls;
    return Query(&settled, error);
  }
  std::string AsyncError() override {
    std::lock_guard<std::mutex> lock(mu);
    return async_error;
  }
  std::string LostPeers() override {
    std::lock_guard<std::mutex> lock(mu);
    return lost_peers;
  }
  void Abort() override { ++aborts; }
  bool StreamIdle() override { return stream_idle.load(); }
  absl::Status OrderCurrentStreamAfter(void* event) override {
    std::lock_guard<std::mutex> lock(mu);
    ordered_after.push_back(event);
    return absl::OkStatus();
  }
  void BindThread() override { ++binds; }

  void SetAsyncError(std::string e) {
    std::lock_guard<std::mutex> lock(mu);
    async_error = std::move(e);
  }
  std::vector<void*> Ordered() {
    std::lock_guard<std::mutex> lock(mu);
    return ordered_after;
  }

  std::mutex mu;
  std::string async_error;
  std::string lost_peers;
  std::vector<void*> ordered_after;
  std::atomic<int> aborts{0};
  std::atomic<int> binds{0};
  std::atomic<bool> stream_idle{true};
  // Where a non-blocking enqueue stands (kPending: waiting for a peer).
  std::atomic<int> settled{kDone};
  std::atomic<int> settle_polls{0};
};

// One collective as the test drives it: its event and the tensor it uses.
struct Fake {
  std::shared_ptr<std::atomic<int>> event =
      std::make_shared<std::atomic<int>>(kPending);
  at::Tensor tensor = at::zeros({4});
  std::shared_ptr<Work> work;

  void Fire(int state = kDone) { event->store(state); }
};

internal::Description AllReduce() { return {"allreduce", "sum, 4 x float32"}; }

WatchdogOptions Options() {
  WatchdogOptions o;
  o.rank = 3;
  o.timeout = absl::InfiniteDuration();
  o.shutdown_grace = absl::Milliseconds(20);
  o.poll_interval = absl::Microseconds(50);
  return o;
}

void Issue(Watchdog& w, Fake& f, WorkKind kind = WorkKind::kCollective,
           internal::Description d = AllReduce()) {
  f.work = w.Issue(d, kind,
                   [&f](const std::string&,
                        Enqueuer& q) -> absl::StatusOr<Watchdog::Enqueued> {
                     DTRAIN_RETURN_IF_ERROR(q.Settle());
                     return Watchdog::Enqueued{f.event, {f.tensor}};
                   });
}

// Waits (bounded by the test's own timeout) until `done` holds.
template <typename F>
void Eventually(F done) {
  while (!done()) absl::SleepFor(absl::Milliseconds(1));
}

TEST(PlanWaitTest, CollectivesOrderTheStreamAndLeaveTheHostFree) {
  const WaitPlan p = PlanWait(WorkKind::kCollective, /*completed=*/false);
  EXPECT_TRUE(p.order_stream);
  EXPECT_FALSE(p.block_host);
}

TEST(PlanWaitTest, BarriersBlockTheHost) {
  const WaitPlan p = PlanWait(WorkKind::kBarrier, /*completed=*/false);
  EXPECT_FALSE(p.order_stream);
  EXPECT_TRUE(p.block_host);
}

TEST(PlanWaitTest, CompletedWorkOnlyReportsItsStatus) {
  for (WorkKind kind : {WorkKind::kCollective, WorkKind::kBarrier}) {
    const WaitPlan p = PlanWait(kind, /*completed=*/true);
    EXPECT_FALSE(p.order_stream);
    EXPECT_FALSE(p.block_host);
  }
}

TEST(WatchdogTest, WaitOrdersTheCallersStreamWithoutBlockingTheHost) {
  ScriptedOps ops;
  Watchdog w(Options(), &ops);
  Fake a;
  Issue(w, a);
  // The event never fired, yet Wait returns: the stream waits, not the host.
  EXPECT_TRUE(a.work->Wait().ok());
  EXPECT_FALSE(a.work->IsCompleted());
  EXPECT_EQ(ops.Ordered(), std::vector<void*>{a.event.get()});
  a.Fire();
  Eventually([&] { return a.work->IsCompleted(); });
  EXPECT_TRUE(a.work->status().ok());
  EXPECT_TRUE(w.Shutdown());
  EXPECT_EQ(ops.aborts.load(), 0);
  EXPECT_EQ(ops.binds.load(), 1);
}

// The defect this guards: a collective that failed after its (non-blocking)
// Wait returned was read on the host as data.
TEST(WatchdogTest, WaitForResultBlocksTheHostAndSeesALaterFailure) {
  ScriptedOps ops;
  Watchdog w(Options(), &ops);
  Fake a;
  Issue(w, a);
  EXPECT_TRUE(a.work->Wait().ok());
  EXPECT_EQ(a.work->WaitForResult(absl::Milliseconds(20)).code(),
            absl::StatusCode::kDeadlineExceeded);
  ops.SetAsyncError("remote process exited or there was a network error");
  const absl::Status s = a.work->WaitForResult();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(s.message()), HasSubstr("remote process exited"));
}

TEST(WatchdogTest, BarrierWaitBlocksTheHostUntilItCompletes) {
  ScriptedOps ops;
  Watchdog w(Options(), &ops);
  Fake b;
  Issue(w, b, WorkKind::kBarrier, {"barrier", ""});
  const absl::Status early = b.work->Wait(absl::Milliseconds(20));
  EXPECT_EQ(early.code(), absl::StatusCode::kDeadlineExceeded) << early;
  b.Fire();
  EXPECT_TRUE(b.work->Wait().ok());
  EXPECT_TRUE(ops.Ordered().empty());
}

TEST(WatchdogTest, CompletesInIssueOrder) {
  ScriptedOps ops;
  Watchdog w(Options(), &ops);
  Fake a, b;
  Issue(w, a);
  Issue(w, b);
  b.Fire();  // A later collective cannot complete before an earlier one.
  absl::SleepFor(absl::Milliseconds(10));
  EXPECT_FALSE(b.work->IsCompleted());
  a.Fire();
  Eventually([&] { return b.work->IsCompleted(); });
  EXPECT_TRUE(a.work->IsCompleted());
}

TEST(WatchdogTest, AsyncErrorAbortsOnceAndFailsEverythingInFlight) {
  ScriptedOps ops;
  Watchdog w(Options(), &ops);
  Fake a, b;
  Issue(w, a);
  Issue(w, b);
  ops.SetAsyncError("remote process exited or there was a network error");
  Eventually([&] { return b.work->IsCompleted(); });
  const absl::Status first = a.work->status();
  EXPECT_EQ(first.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(first.message()),
              HasSubstr("[rank 3] nccl allreduce #1 (sum, 4 x float32) failed "
                        "after "));
  EXPECT_THAT(std::string(first.message()), HasSubstr("remote process exited"));
  EXPECT_THAT(std::string(b.work->status().message()),
              HasSubstr("allreduce #2 (sum, 4 x float32) not completed: "));
  EXPECT_EQ(ops.aborts.load(), 1);

  // Broken: later collectives fail at once with the first error, and the
  // enqueue is never called on the aborted communicator.
  bool enqueued = false;
  std::shared_ptr<Work> c = w.Issue(AllReduce(), WorkKind::kCollective,
                                    [&](const std::string&, Enqueuer&) {
                                      enqueued = true;
                                      return Watchdog::Enqueued{};
                                    });
  EXPECT_FALSE(enqueued);
  EXPECT_EQ(c->Wait().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(c->status().message()),
              HasSubstr("allreduce #3 (sum, 4 x float32) not run: "));
  EXPECT_FALSE(w.Shutdown());
  EXPECT_EQ(ops.aborts.load(), 1);
}

// The flight recorder sees each collective issued, on the stream, and ended.
TEST(WatchdogTest, TheFlightRecorderNotesEachCollective) {
  ScriptedOps ops;
  WatchdogOptions options = Options();
  options.rank = 41;  // Entries of this test only.
  Watchdog w(options, &ops);
  Fake a, b;
  Issue(w, a);
  Issue(w, b);
  a.Fire();
  Eventually([&] { return a.work->IsCompleted(); });
  std::vector<FlightEntry> e = FlightRecorder::Process().Entries(41);
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0].backend, "nccl");
  EXPECT_EQ(e[0].seq, 1);
  EXPECT_EQ(e[0].op, "allreduce");
  EXPECT_EQ(e[0].details, "sum, 4 x float32");
  EXPECT_EQ(e[0].state, FlightEntry::State::kCompleted);
  EXPECT_EQ(e[1].state, FlightEntry::State::kStarted);
  ops.SetAsyncError("remote process exited");
  Eventually([&] { return b.work->IsCompleted(); });
  e = FlightRecorder::Process().Entries(41);
  EXPECT_EQ(e[1].state, FlightEntry::State::kFailed);
  EXPECT_THAT(e[1].error, HasSubstr("nccl allreduce #2"));
}

TEST(WatchdogTest, AbortFromOutsideFailsWhatIsInFlightAndWhatComes) {
  ScriptedOps ops;
  Watchdog w(Options(), &ops);
  Fake a;
  Issue(w, a);
  w.Abort(absl::AbortedError("the host's shared-memory step failed"));
  ASSERT_TRUE(a.work->IsCompleted());
  EXPECT_THAT(std::string(a.work->status().message()),
              HasSubstr("allreduce #1 (sum, 4 x float32) not completed: the "
                        "host's shared-memory step failed"));
  EXPECT_EQ(ops.aborts.load(), 1);
  Fake b;
  Issue(w, b);
  EXPECT_THAT(std::string(b.work->status().message()),
              HasSubstr("allreduce #2 (sum, 4 x float32) not run: "));
  w.Abort(absl::AbortedError("again"));  // No second abort.
  EXPECT_EQ(ops.aborts.load(), 1);
  EXPECT_FALSE(w.Shutdown());  // Not finalized: the communicator is gone.
}

TEST(WatchdogTest, TimeoutAbortsTheCommunicator) {
  ScriptedOps ops;
  WatchdogOptions o = Options();
  o.timeout = absl::Milliseconds(30);
  Watchdog w(o, &ops);
  Fake a;
  Issue(w, a);
  Eventually([&] { return a.work->IsCompleted(); });
  const absl::Status s = a.work->status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(s.message()), HasSubstr("timed out after"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("(timeout 30ms)"));
  EXPECT_EQ(ops.aborts.load(), 1);
}

TEST(WatchdogTest, ErrorsNameThePeerKnownToBeGone) {
  for (bool timeout : {false, true}) {
    ScriptedOps ops;
    ops.lost_peers = "rank 1 (pid 4242 on node01) has exited";
    WatchdogOptions o = Options();
    if (timeout) o.timeout = absl::Milliseconds(10);
    Watchdog w(o, &ops);
    Fake a;
    Issue(w, a);
    if (!timeout) ops.SetAsyncError("remote process exited");
    Eventually([&] { return a.work->IsCompleted(); });
    EXPECT_THAT(std::string(a.work->status().message()),
                HasSubstr("rank 1 (pid 4242 on node01) has exited"))
        << a.work->status();
    EXPECT_THAT(std::string(a.work->status().message()),
                ::testing::Not(HasSubstr("a peer")));
  }
}

TEST(WatchdogTest, DeviceErrorFailsTheCollective) {
  ScriptedOps ops;
  Watchdog w(Options(), &ops);
  Fake a;
  Issue(w, a);
  a.Fire(kFailed);
  Eventually([&] { return a.work->IsCompleted(); });
  EXPECT_EQ(a.work->status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(a.work->status().message()),
              HasSubstr("unspecified launch failure"));
  EXPECT_EQ(ops.aborts.load(), 1);
}

TEST(WatchdogTest, FailedEnqueueAbortsAndFailsTheRest) {
  ScriptedOps ops;
  Watchdog w(Options(), &ops);
  Fake a;
  Issue(w, a);
  std::shared_ptr<Work> b =
      w.Issue(AllReduce(), WorkKind::kCollective,
              [](const std::string& who,
                 Enqueuer&) -> absl::StatusOr<Watchdog::Enqueued> {
                return absl::UnavailableError(who + " failed to start: boom");
              });
  EXPECT_THAT(std::string(b->Wait().message()),
              HasSubstr("[rank 3] nccl allreduce #2 (sum, 4 x float32) failed "
                        "to start: boom"));
  EXPECT_THAT(std::string(a.work->status().message()),
              HasSubstr("allreduce #1 (sum, 4 x float32) not completed: "));
  EXPECT_EQ(ops.aborts.load(), 1);
}

// The defect this guards: a collective's first run connects to its peers
// (NCCL 2.22+), and an enqueue waiting for an absent peer held the lock that
// Abort needs, so nothing could step in before the timeout (or ever).
TEST(WatchdogTest, AbortStepsIntoAnEnqueueWaitingForAPeer) {
  ScriptedOps ops;
  Watchdog w(Options(), &ops);  // No timeout: only the abort can end it.
  ops.settled = kPending;
  Fake a;
  std::thread issuer([&] { Issue(w, a); });
  Eventually([&] { return ops.settle_polls.load() > 0; });
  w.Abort(absl::AbortedError("the launcher is stopping the job"));
  issuer.join();
  EXPECT_EQ(ops.aborts.load(), 1);
  const absl::Status s = a.work->status();
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("[rank 3] nccl allreduce #1 (sum, 4 x float32) not "
                        "started: the launcher is stopping the job"));
  EXPECT_FALSE(w.Shutdown());
}

TEST(WatchdogTest, AnEnqueueThatNeverSettlesFailsAtTheTimeoutAndAborts) {
  ScriptedOps ops;
  ops.lost_peers = "rank 1 (pid 4242 on node01) has exited";
  WatchdogOptions o = Options();
  o.timeout = absl::Milliseconds(30);
  Watchdog w(o, &ops);
  ops.settled = kPending;
  Fake a;
  Issue(w, a);
  const absl::Status s = a.work->Wait();
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("allreduce #1 (sum, 4 x float32) failed to start "
                        "after "));
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("still in progress at the timeout (30ms): rank 1 (pid "
                        "4242 on node01) has exited"));
  EXPECT_EQ(ops.aborts.load(), 1);
  // The communicator is gone: later calls never reach it.
  bool called = false;
  std::shared_ptr<Work> b = w.Issue(AllReduce(), WorkKind::kCollective,
                                    [&](const std::string&, Enqueuer&) {
                                      called = true;
                                      return Watchdog::Enqueued{};
                                    });
  EXPECT_FALSE(called);
  EXPECT_THAT(std::string(b->status().message()), HasSubstr("not run: "));
}

TEST(WatchdogTest, AnEnqueueTheLibraryRefusesFailsToStart) {
  ScriptedOps ops;
  Watchdog w(Options(), &ops);
  ops.settled = kFailed;
  Fake a;
  Issue(w, a);
  EXPECT_THAT(std::string(a.work->status().message()),
              HasSubstr("allreduce #1 (sum, 4 x float32) failed to start "
                        "after "));
  EXPECT_EQ(ops.aborts.load(), 1);
}

TEST(WatchdogTest, CallsNeverReachAnAbortedCommunicator) {
  ScriptedOps ops;
  Watchdog w(Options(), &ops);
  int calls = 0;
  std::shared_ptr<Work> a =
      w.Issue(AllReduce(), WorkKind::kCollective,
              [&](const std::string&,
                  Enqueuer& q) -> absl::StatusOr<Watchdog::Enqueued> {
                auto call = [&] {
                  ++calls;
                  return absl::OkStatus();
                };
                DTRAIN_RETURN_IF_ERROR(q.Call(call));
                // Aborted between two library calls of one collective (an
                // allgather and its copies): the second is never made.
                w.Abort(absl::AbortedError("a peer failed"));
                DTRAIN_RETURN_IF_ERROR(q.Call(call));
                return Watchdog::Enqueued{};
              });
  EXPECT_EQ(calls, 1);
  EXPECT_THAT(std::string(a->status().message()),
              HasSubstr("not started: a peer failed"));
}

// The defect this guards: an enqueue that failed after queuing part of its
// work (a copy into scratch, then a refused library call) freed that scratch
// at once, while the device could still write it.
TEST(WatchdogTest, AFailedEnqueueKeepsItsMemoryUntilTheStreamDrains) {
  ScriptedOps ops;
  ops.stream_idle = false;
  WatchdogOptions o = Options();
  o.drain_limit = absl::Milliseconds(5);
  Watchdog w(o, &ops);
  at::Tensor scratch = at::zeros({4});
  std::shared_ptr<Work> a =
      w.Issue(AllReduce(), WorkKind::kCollective,
              [&](const std::string& who,
                  Enqueuer& q) -> absl::StatusOr<Watchdog::Enqueued> {
                q.Keep(scratch);
                return absl::UnavailableError(who + " failed to start: boom");
              });
  EXPECT_THAT(std::string(a->status().message()), HasSubstr("boom"));
  EXPECT_EQ(ops.aborts.load(), 1);
  // The stream never drained: the memory is never freed.
  EXPECT_GT(scratch.use_count(), 1);
}

TEST(WatchdogTest, AnAbortWithAnOkReasonStillFailsEverything) {
  ScriptedOps ops;
  Watchdog w(Options(), &ops);
  Fake a;
  Issue(w, a);
  w.Abort(absl::OkStatus());
  EXPECT_EQ(a.work->status().code(), absl::StatusCode::kAborted);
  Fake b;
  Issue(w, b);
  EXPECT_EQ(b.work->status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(std::string(b.work->status().message()), HasSubstr("not run"));
}

TEST(PollPauseTest, YieldsFirstThenSleepsDoublingUpToTheBound) {
  const absl::Duration longest = absl::Microseconds(200);
  for (int n = 0; n < kPollYields; ++n) {
    EXPECT_EQ(PollPause(n, longest), absl::ZeroDuration()) << n;
  }
  EXPECT_EQ(PollPause(kPollYields, longest), absl::Microseconds(10));
  EXPECT_EQ(PollPause(kPollYields + 1, longest), absl::Microseconds(20));
  EXPECT_EQ(PollPause(kPollYields + 5, longest), longest);
  EXPECT_EQ(PollPause(1 << 20, longest), longest);
}

// The defect this guards: a rank leaving with a collective in flight waited
// for the whole timeout (infinite here) in the backend's destructor.
TEST(WatchdogTest, ShutdownAbortsWhatIsStillRunningAfterTheGrace) {
  ScriptedOps ops;
  auto w = std::make_unique<Watchdog>(Options(), &ops);
  Fake done, stuck;
  Issue(*w, done);
  Issue(*w, stuck);
  done.Fire();
  EXPECT_FALSE(w->Shutdown());
  EXPECT_TRUE(done.work->status().ok());
  const absl::Status s = stuck.work->status();
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("allreduce #2 (sum, 4 x float32) was still running "
                        "when the backend was destroyed"));
  EXPECT_EQ(ops.aborts.load(), 1);
  // Issuing after shutdown fails instead of touching the communicator.
  Fake late;
  Issue(*w, late);
  EXPECT_EQ(late.work->Wait().code(), absl::StatusCode::kAborted);
  w.reset();
  EXPECT_EQ(ops.aborts.load(), 1);
}

TEST(WatchdogTest, ShutdownLetsCollectivesFinishWithinTheGrace) {
  ScriptedOps ops;
  WatchdogOptions o = Options();
  o.shutdown_grace = absl::InfiniteDuration();
  Watchdog w(o, &ops);
  Fake a;
  Issue(w, a);
  std::thread fire([&] {
    absl::SleepFor(absl::Milliseconds(20));
    a.Fire();
  });
  EXPECT_TRUE(w.Shutdown());
  fire.join();
  EXPECT_TRUE(a.work->status().ok());
  EXPECT_EQ(ops.aborts.load(), 0);
}

TEST(WatchdogTest, MemoryOutlivesAnAbortUntilTheStreamDrains) {
  ScriptedOps ops;
  ops.stream_idle = false;
  WatchdogOptions o = Options();
  o.drain_limit = absl::InfiniteDuration();
  Watchdog w(o, &ops);
  Fake a;
  Issue(w, a);
  const long held = a.tensor.use_count();
  ASSERT_GT(held, 1);  // The watchdog holds the tensor too.
  ops.SetAsyncError("unhandled system error");
  Eventually([&] { return ops.aborts.load() == 1; });
  absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ(a.tensor.use_count(), held);  // The stream still runs.
  ops.stream_idle = true;
  Eventually([&] { return a.tensor.use_count() == 1; });
}

TEST(WatchdogTest, MemoryIsNeverFreedWhenTheStreamDoesNotDrain) {
  ScriptedOps ops;
  ops.stream_idle = false;
  WatchdogOptions o = Options();
  o.drain_limit = absl::Milliseconds(5);
  Watchdog w(o, &ops);
  Fake a;
  Issue(w, a);
  const long held = a.tensor.use_count();
  ops.SetAsyncError("unhandled system error");
  Eventually([&] { return a.work->IsCompleted(); });
  EXPECT_FALSE(w.Shutdown());
  EXPECT_EQ(a.tensor.use_count(), held);
}

}  // namespace
}  // namespace dtrain::backend::nccl_internal
