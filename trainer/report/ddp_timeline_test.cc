#include "trainer/report/ddp_timeline.h"

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace dtrain::trainer {
namespace {

// Two buckets: the first launched and running during backward, the second
// after it.
ddp::StepStats Step(int64_t step, double scale, bool timed = true) {
  ddp::StepStats s;
  s.step = step;
  s.num_buckets = 2;
  s.backward_until_last_gradient = absl::Milliseconds(100 * scale);
  s.hooks = absl::Milliseconds(2 * scale);
  s.synchronize = absl::Milliseconds(30 * scale);
  s.bucket_bytes = {1 << 20, 4 << 20};
  s.bucket_launch_offsets = {absl::Milliseconds(40 * scale),
                             absl::Milliseconds(100 * scale)};
  if (timed) {
    s.bucket_start_offsets = {absl::Milliseconds(41 * scale),
                              absl::Milliseconds(101 * scale)};
    s.bucket_finish_offsets = {absl::Milliseconds(60 * scale),
                               absl::Milliseconds(125 * scale)};
  }
  return s;
}

TEST(DdpTimelineTest, NothingAddedIsNoTimeline) {
  DdpTimelineAccumulator a;
  EXPECT_FALSE(a.Mean().has_value());
}

TEST(DdpTimelineTest, LeavesOutTheRunsFirstStep) {
  DdpTimelineAccumulator a;
  a.Add(Step(1, 10.0));
  EXPECT_FALSE(a.Mean().has_value());
  a.Add(Step(2, 1.0));
  ASSERT_TRUE(a.Mean().has_value());
  EXPECT_EQ(a.Mean()->steps, 1);
  EXPECT_NEAR(a.Mean()->backward_seconds, 0.1, 1e-9);
}

TEST(DdpTimelineTest, AveragesStepsAndMeasuresOverlap) {
  DdpTimelineAccumulator a;
  a.Add(Step(2, 1.0));
  a.Add(Step(3, 3.0));
  const absl::optional<DdpTimeline> m = a.Mean();
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->steps, 2);
  EXPECT_TRUE(m->timed);
  EXPECT_NEAR(m->backward_seconds, 0.2, 1e-9);
  EXPECT_NEAR(m->hooks_seconds, 0.004, 1e-9);
  EXPECT_NEAR(m->synchronize_seconds, 0.06, 1e-9);
  ASSERT_EQ(m->buckets.size(), 2u);
  EXPECT_EQ(m->buckets[1].bytes, 4 << 20);
  EXPECT_NEAR(m->buckets[0].launch_seconds, 0.08, 1e-9);
  EXPECT_NEAR(m->buckets[0].start_seconds, 0.082, 1e-9);
  EXPECT_NEAR(m->buckets[1].finish_seconds, 0.25, 1e-9);
  // Communication from the first start to the last finish: 84 ms and 252 ms;
  // of it, until backward's end: 59 ms and 177 ms.
  EXPECT_NEAR(m->communication_seconds, 0.168, 1e-9);
  EXPECT_NEAR(m->overlap_seconds, 0.118, 1e-9);
}

TEST(DdpTimelineTest, UntimedBackendsGiveLaunchesOnly) {
  DdpTimelineAccumulator a;
  a.Add(Step(2, 1.0, /*timed=*/false));
  const absl::optional<DdpTimeline> m = a.Mean();
  ASSERT_TRUE(m.has_value());
  EXPECT_FALSE(m->timed);
  EXPECT_NEAR(m->buckets[1].launch_seconds, 0.1, 1e-9);
  EXPECT_EQ(m->communication_seconds, 0);
  EXPECT_EQ(m->overlap_seconds, 0);
}

TEST(DdpTimelineTest, ResetStartsOver) {
  DdpTimelineAccumulator a;
  a.Add(Step(2, 1.0));
  a.Reset();
  EXPECT_FALSE(a.Mean().has_value());
}

}  // namespace
}  // namespace dtrain::trainer
