// Stall inspection with ranks as threads: a rank that does not join a
// collective is named, with what it last did, in a warning while the
// collective waits and in the error when it times out; a collective every
// rank has issued is said to be held up in the transport; a store that no
// longer answers costs the report at most its budget; a peer on this host
// whose process has exited is named once instead of a stall report.

#include "dist/backend/stall/stall_inspector.h"

#include <ATen/ATen.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "dist/backend/backend_testing.h"
#include "dist/backend/gloo/gloo_backend.h"
#include "dist/backend/stall/inspecting_backend.h"
#include "dist/backend/work.h"
#include "dist/store/hash_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::backend {
namespace {

using ::testing::HasSubstr;

// Warnings of all ranks, in order.
struct Lines {
  std::mutex mu;
  std::vector<std::string> lines;
  void Add(const std::string& line) {
    std::lock_guard<std::mutex> lock(mu);
    lines.push_back(line);
  }
  std::string All() {
    std::lock_guard<std::mutex> lock(mu);
    std::string all;
    for (const std::string& l : lines) all += l + "\n";
    return all;
  }
};

TEST(StallInspectorTest, NamesTheRankThatHasNotJoinedWhileWaitingAndOnTimeout) {
  Lines warnings;
  testing::Notification rank0_done;
  testing::RunRanks(
      2,
      [&](int rank, int size, std::shared_ptr<store::Store> store)
          -> absl::StatusOr<std::unique_ptr<Backend>> {
        Membership group;
        group.rank = rank;
        group.world_size = size;
        group.store = store;
        group.timeout = absl::Seconds(3);
        DTRAIN_ASSIGN_OR_RETURN(std::unique_ptr<Backend> gloo,
                                CreateGlooBackend(group));
        StallInspectorOptions s;
        s.store = store;
        s.warn_after = absl::Milliseconds(800);
        s.publish_every = absl::Milliseconds(50);
        s.warn = [&](const std::string& line) { warnings.Add(line); };
        return WithStallInspection(std::move(gloo), s);
      },
      [&](Backend& b) {
        ASSERT_TRUE(b.AllReduce(at::ones({10}), ReduceOp::kSum, "bucket 0")
                        ->Wait()
                        .ok());
        if (b.rank() == 1) {  // Stays, but issues nothing more.
          rank0_done.WaitForNotificationWithTimeout(absl::Seconds(60));
          return;
        }
        absl::Status s =
            b.AllReduce(at::ones({10}), ReduceOp::kSum, "bucket 1")->Wait();
        ASSERT_FALSE(s.ok());
        EXPECT_THAT(std::string(s.message()),
                    HasSubstr("[stall report: rank 1 has not joined collective "
                              "#2 (allreduce, bucket 1): last seen at "
                              "collective #1 (allreduce, bucket 0), "));
        // Later calls fail with the first error; the report is not repeated.
        absl::Status later = b.Barrier()->Wait();
        EXPECT_FALSE(later.ok());
        EXPECT_THAT(std::string(later.message()),
                    ::testing::Not(HasSubstr("stall report")));
        rank0_done.Notify();
      });
  const std::string all = warnings.All();
  EXPECT_THAT(all, HasSubstr("[rank 0] collective #2 (allreduce, bucket 1) has "
                             "waited "));
  EXPECT_THAT(all, HasSubstr("rank 1 has not joined collective #2 (allreduce, "
                             "bucket 1): last seen at collective #1 "
                             "(allreduce, bucket 0), "));
  EXPECT_THAT(all, ::testing::Not(HasSubstr("[rank 1]")));
}

// A Work finished or not as the test says.
class FakeWork : public Work {
 public:
  absl::Status Wait(absl::Duration) override { return absl::OkStatus(); }
  bool IsCompleted() override { return false; }
  absl::Status status() override { return absl::OkStatus(); }
};

TEST(StallInspectorTest, CollectiveEveryRankIssuedIsHeldUpInTheTransport) {
  auto store = std::make_shared<store::HashStore>();
  auto work = std::make_shared<FakeWork>();
  StallInspectorOptions o;
  o.store = store;
  o.size = 3;
  o.publish_every = absl::Milliseconds(20);
  o.warn = [](const std::string&) {};
  std::vector<std::unique_ptr<StallInspector>> ranks;
  for (int r = 0; r < 3; ++r) {
    o.rank = r;
    ranks.push_back(std::make_unique<StallInspector>(o));
  }
  EXPECT_THAT(ranks[0]->Report(1),
              HasSubstr("rank 1 has not joined collective #1: it has "
                        "issued no collective yet"));
  for (int r = 0; r < 3; ++r) ranks[r]->Issued("barrier", "", work);
  ranks[2]->Issued("broadcast", "root 0", work);
  ranks[0]->Issued("broadcast", "root 0", work);
  absl::SleepFor(absl::Milliseconds(500));  // Published by now.
  EXPECT_THAT(ranks[1]->Report(1),
              HasSubstr("every rank has issued collective #1 (barrier): it "
                        "is held up in the transport"));
  const std::string r = ranks[0]->Report(2);
  EXPECT_THAT(r, HasSubstr("rank 1 has not joined collective #2 (broadcast, "
                           "root 0): last seen at collective #1 (barrier), "));
  EXPECT_THAT(r, ::testing::Not(HasSubstr("rank 2")));
}

// Ranks 0 and 1 share a host, rank 2 is elsewhere; every process runs, and
// rank 1's is stopped while `stop` says so.
TEST(StallInspectorTest, AStoppedPeerIsNamedEvenWhenItHasIssuedTheCollective) {
  auto store = std::make_shared<store::HashStore>();
  auto work = std::make_shared<FakeWork>();
  auto stop = std::make_shared<std::atomic<bool>>(false);
  std::vector<std::unique_ptr<StallInspector>> ranks;
  for (int r = 0; r < 3; ++r) {
    StallInspectorOptions o;
    o.store = store;
    o.rank = r;
    o.size = 3;
    o.publish_every = absl::Milliseconds(20);
    o.warn = [](const std::string&) {};
    o.pid = 1000 + r;
    o.host_key = r == 2 ? "host b" : "host a";
    o.alive = [](int64_t) { return true; };
    o.stopped = [stop](int64_t pid) { return pid == 1001 && stop->load(); };
    ranks.push_back(std::make_unique<StallInspector>(o));
  }
  for (int r = 0; r < 3; ++r) ranks[r]->Issued("allreduce", "bucket 1", work);
  absl::SleepFor(absl::Milliseconds(500));  // Published and identified.
  // Rank 2 cannot be checked from host a: no "not by a rank".
  EXPECT_EQ(ranks[0]->Report(1),
            "every rank has issued collective #1 (allreduce, bucket 1): it is "
            "held up in the transport or by a rank that cannot be checked "
            "from this host (rank 2)");
  stop->store(true);
  EXPECT_THAT(ranks[0]->Report(1),
              ::testing::MatchesRegex(
                  "rank 1 \\(pid 1001\\) is stopped \\(SIGSTOP or a "
                  "tracer\\): last seen at collective #1 \\(allreduce, bucket "
                  "1\\), [0-9.]+m?s ago"));
  // Behind as well as stopped: named once, as stopped.
  ranks[0]->Issued("allreduce", "bucket 0", work);
  const std::string behind = ranks[0]->Report(2);
  EXPECT_THAT(behind, HasSubstr("rank 1 (pid 1001) is stopped"));
  EXPECT_THAT(behind, HasSubstr("rank 2 has not joined collective #2"));
  EXPECT_THAT(behind, ::testing::Not(HasSubstr("rank 1 has not joined")));
  // Rank 2's own view: ranks 0 and 1 are elsewhere, so nothing is stopped.
  EXPECT_THAT(ranks[2]->Report(1),
              HasSubstr("cannot be checked from this host (ranks 0, 1)"));
}

// The defect this guards: a CUDA bucket's Work is dropped by DDP right after
// its (non-blocking) Wait, and the inspector took a dropped handle for a
// finished collective, so it never warned about one.
TEST(StallInspectorTest, WarnsAboutACollectiveWhoseHandleTheCallerDropped) {
  Lines warnings;
  auto store = std::make_shared<store::HashStore>();
  StallInspectorOptions o;
  o.store = store;
  o.size = 2;
  o.publish_every = absl::Milliseconds(20);
  o.warn_after = absl::Milliseconds(100);
  o.warn = [&warnings](const std::string& line) { warnings.Add(line); };
  StallInspector rank0(o);
  rank0.Issued("allreduce", "bucket 0", std::make_shared<FakeWork>());
  for (int i = 0; i < 1000 && warnings.All().empty(); ++i)
    absl::SleepFor(absl::Milliseconds(10));
  EXPECT_THAT(warnings.All(),
              HasSubstr("[rank 0] collective #1 (allreduce, bucket 0) has "
                        "waited "));
}

// A store whose reads never come back in time, as one whose server is stopped.
class SilentStore : public store::HashStore {
 public:
  using HashStore::Get;
  absl::StatusOr<std::string> Get(absl::string_view key,
                                  absl::Duration timeout) override {
    absl::SleepFor(absl::Seconds(5));
    return HashStore::Get(key, timeout);
  }
};

TEST(StallInspectorTest, AStoreThatDoesNotAnswerCostsAtMostTheBudget) {
  StallInspectorOptions o;
  o.store = std::make_shared<SilentStore>();
  o.size = 2;
  o.read_budget = absl::Milliseconds(300);
  o.warn = [](const std::string&) {};
  StallInspector inspector(o);
  const absl::Time start = absl::Now();
  EXPECT_THAT(inspector.Report(1),
              HasSubstr("the store did not answer within 300ms (rank 0 hosts "
                        "it: it may be the rank that is stuck)"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
}

// Ranks 0 and 1 share a host, rank 2 is elsewhere; the processes of ranks 0
// and 2 have exited (pids 1000 and 1002).
std::vector<std::unique_ptr<StallInspector>> ThreeRanksTwoGone(
    std::shared_ptr<store::Store> store, Lines* warnings) {
  std::vector<std::unique_ptr<StallInspector>> ranks;
  for (int r = 0; r < 3; ++r) {
    StallInspectorOptions o;
    o.store = store;
    o.rank = r;
    o.size = 3;
    o.publish_every = absl::Milliseconds(20);
    o.warn_after = absl::Milliseconds(100);
    o.warn = [warnings](const std::string& line) { warnings->Add(line); };
    o.pid = 1000 + r;
    o.host_key = r == 2 ? "host b" : "host a";
    o.alive = [](int64_t pid) { return pid == 1001; };
    ranks.push_back(std::make_unique<StallInspector>(o));
  }
  return ranks;
}

// Until the inspector's thread has read the peers' identities.
bool WaitForExited(StallInspector& inspector) {
  for (int i = 0; i < 1000; ++i) {
    if (!inspector.ExitedPeers().empty()) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return false;
}

TEST(StallInspectorTest, APeerWhoseProcessExitedIsNamedOnceInsteadOfAStall) {
  Lines warnings;
  auto store = std::make_shared<store::HashStore>();
  auto ranks = ThreeRanksTwoGone(store, &warnings);
  ASSERT_TRUE(WaitForExited(*ranks[1]));
  const std::vector<StallInspector::ExitedPeer> exited =
      ranks[1]->ExitedPeers();
  ASSERT_EQ(exited.size(), 1u);  // Not rank 2: its pid means nothing here.
  EXPECT_EQ(exited[0].ToString(), "rank 0 (pid 1000) has exited");
  // Two collectives wait for it; one warning says why.
  auto work = std::make_shared<FakeWork>();
  ranks[1]->Issued("allreduce", "bucket 0", work);
  ranks[1]->Issued("allreduce", "bucket 1", work);
  for (int i = 0; i < 1000 && warnings.All().empty(); ++i)
    absl::SleepFor(absl::Milliseconds(10));
  absl::SleepFor(absl::Milliseconds(500));  // Time for a second warning.
  const std::string all = warnings.All();
  EXPECT_THAT(all,
              ::testing::MatchesRegex(
                  "\\[rank 1\\] collective #1 \\(allreduce, bucket 0\\) has "
                  "waited [0-9.]+m?s: rank 0 \\(pid 1000\\) has exited\n"))
      << "want exactly one warning";
  EXPECT_EQ(ranks[1]->Report(2), "rank 0 (pid 1000) has exited");
}

// A Backend whose every collective has failed with `message`.
class FailedBackend : public Backend {
 public:
  explicit FailedBackend(std::string message) : message_(std::move(message)) {}
  absl::string_view name() const override { return "fake"; }
  int rank() const override { return 1; }
  int size() const override { return 3; }
  std::shared_ptr<Work> AllReduce(at::Tensor, ReduceOp,
                                  absl::string_view) override {
    return Failed();
  }
  std::shared_ptr<Work> Broadcast(at::Tensor, int) override { return Failed(); }
  std::shared_ptr<Work> AllGather(std::vector<at::Tensor>,
                                  at::Tensor) override {
    return Failed();
  }
  std::shared_ptr<Work> ReduceScatter(at::Tensor, std::vector<at::Tensor>,
                                      ReduceOp) override {
    return Failed();
  }
  std::shared_ptr<Work> Barrier() override { return Failed(); }
  void Abort(const absl::Status&) override {}

 private:
  std::shared_ptr<Work> Failed() {
    return internal::CompletionWork::Failed(absl::UnavailableError(message_));
  }
  const std::string message_;
};

TEST(StallInspectorTest, AFailureBlamesTheExitedPeerOnceWithoutAStallReport) {
  for (const bool said : {true, false}) {
    SCOPED_TRACE(said ? "the backend names it" : "the backend does not");
    Lines warnings;
    auto store = std::make_shared<store::HashStore>();
    // Ranks 0 and 2 publish who they are; rank 1 is the backend below.
    auto others = ThreeRanksTwoGone(store, &warnings);
    StallInspectorOptions o;
    o.store = store;
    o.pid = 1001;
    o.host_key = "host a";
    o.alive = [](int64_t pid) { return pid == 1001; };
    o.warn = [&warnings](const std::string& line) { warnings.Add(line); };
    const std::string error =
        said ? "[rank 1] shm allreduce #5 (...): rank 0 (pid 1000) has exited"
             : "[rank 1] gloo allreduce #5 (...): peer rank 0 closed the "
               "connection";
    std::unique_ptr<Backend> b =
        WithStallInspection(std::make_unique<FailedBackend>(error), o);
    const absl::Status s =
        b->AllReduce(at::ones({1}), ReduceOp::kSum, "")->Wait();
    EXPECT_EQ(
        std::string(s.message()),
        said ? error : absl::StrCat(error, "; rank 0 (pid 1000) has exited"));
  }
}

}  // namespace
}  // namespace dtrain::backend
