#include "base/trace_marks.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace dtrain::base {
namespace {

TEST(TraceMarksTest, EachSinkGetsWhatIsNotedWhileItIsSubscribed) {
  NoteTraceMark(0, "before", "nobody listens");
  std::vector<TraceMark> a, b;
  {
    TraceMarkSubscription sa =
        SubscribeTraceMarks([&](const TraceMark& m) { a.push_back(m); });
    NoteTraceMark(1, "stall warning", "rank 0 has not joined");
    {
      TraceMarkSubscription sb =
          SubscribeTraceMarks([&](const TraceMark& m) { b.push_back(m); });
      NoteTraceMark(0, "second", "");
    }
    NoteTraceMark(0, "third", "");
  }
  NoteTraceMark(0, "after", "");
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a[0].rank, 1);
  EXPECT_EQ(a[0].name, "stall warning");
  EXPECT_EQ(a[0].text, "rank 0 has not joined");
  EXPECT_LE(a[0].at, absl::Now());
  EXPECT_EQ(a[2].name, "third");
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].name, "second");
}

TEST(TraceMarksTest, AMovedSubscriptionStaysOneAndEndsOnce) {
  int got = 0;
  TraceMarkSubscription kept;
  {
    TraceMarkSubscription s =
        SubscribeTraceMarks([&](const TraceMark&) { ++got; });
    kept = std::move(s);
  }
  NoteTraceMark(0, "x", "");
  EXPECT_EQ(got, 1);
  kept = TraceMarkSubscription();
  NoteTraceMark(0, "y", "");
  EXPECT_EQ(got, 1);
}

TEST(TraceMarksTest, MarksFromManyThreadsAllArrive) {
  std::atomic<int> got{0};
  TraceMarkSubscription s =
      SubscribeTraceMarks([&](const TraceMark&) { ++got; });
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < 1000; ++i) NoteTraceMark(t, "m", "");
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(got.load(), 4000);
}

}  // namespace
}  // namespace dtrain::base
