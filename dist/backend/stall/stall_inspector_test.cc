// Stall inspection with ranks as threads: a rank that does not join a
// collective is named, with what it last did, in a warning while the
// collective waits and in the error when it times out; a collective every
// rank has issued is said to be held up in the transport; a store that no
// longer answers costs the report at most its budget.

#include "dist/backend/stall/stall_inspector.h"

#include <ATen/ATen.h>

#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "dist/backend/backend_testing.h"
#include "dist/backend/gloo/gloo_backend.h"
#include "dist/backend/stall/inspecting_backend.h"
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
        GlooBackendOptions o;
        o.rank = rank;
        o.world_size = size;
        o.store = store;
        o.timeout = absl::Seconds(3);
        absl::StatusOr<std::unique_ptr<Backend>> gloo = CreateGlooBackend(o);
        if (!gloo.ok()) return gloo.status();
        StallInspectorOptions s;
        s.store = store;
        s.warn_after = absl::Milliseconds(800);
        s.publish_every = absl::Milliseconds(50);
        s.warn = [&](const std::string& line) { warnings.Add(line); };
        return WithStallInspection(std::move(*gloo), s);
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

}  // namespace
}  // namespace dtrain::backend
