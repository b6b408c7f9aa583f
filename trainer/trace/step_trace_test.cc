#include "trainer/trace/step_trace.h"

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "base/chrome_trace.h"
#include "gtest/gtest.h"
#include "trainer/trace/trace_merge.h"

namespace dtrain::trainer {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);

absl::Time Ms(double ms) { return kT0 + absl::Microseconds(ms * 1000); }

// A step of two micro-batches from `at` ms: waits, forward and backward of
// each, the gradient sync and the optimizer, 10 ms in all.
StepPhases Phases(double at, std::vector<TimeSpan>* waits) {
  StepPhases p;
  *waits = {{Ms(at), Ms(at + 1)}, {Ms(at + 4), Ms(at + 4.5)}};
  p.forward = {{Ms(at + 1), Ms(at + 2)}, {Ms(at + 4.5), Ms(at + 5.5)}};
  p.backward = {{Ms(at + 2), Ms(at + 4)}, {Ms(at + 5.5), Ms(at + 8)}};
  p.synchronize = {Ms(at + 8), Ms(at + 9)};
  p.optimizer = {Ms(at + 9), Ms(at + 10)};
  return p;
}

// Two buckets launched in the last backward; bucket 1 queues behind 0.
ddp::StepStats Buckets(double at) {
  ddp::StepStats s;
  s.num_buckets = 2;
  s.first_hook = Ms(at + 6);
  s.bucket_bytes = {4096, 1024};
  s.bucket_launch_offsets = {absl::Milliseconds(0.5), absl::Milliseconds(1)};
  s.bucket_start_offsets = {absl::Milliseconds(0.5), absl::Milliseconds(2)};
  s.bucket_finish_offsets = {absl::Milliseconds(2), absl::Milliseconds(2.8)};
  return s;
}

void RunSteps(StepTrace& trace, int steps, bool timed = true) {
  for (int step = 1; step <= steps; ++step) {
    const double at = (step - 1) * 12.0;
    std::vector<TimeSpan> waits;
    const StepPhases p = Phases(at, &waits);
    for (const TimeSpan& w : waits) trace.DataWait(w.start, w.end);
    ddp::StepStats stats = Buckets(at);
    if (!timed) {
      stats.bucket_start_offsets.clear();
      stats.bucket_finish_offsets.clear();
    }
    trace.Step(step, p, &stats);
  }
}

std::vector<std::string> Names(const std::vector<TraceRecord>& records,
                               int track) {
  std::vector<std::string> names;
  for (const TraceRecord& r : records) {
    if (r.track == track) names.push_back(r.name);
  }
  return names;
}

TEST(StepTraceTest, AStepsPhasesInOrderAndItsBucketsOnTheirTracks) {
  StepTrace trace(2, 2);
  RunSteps(trace, 3);
  const std::vector<TraceRecord> records = trace.Records();
  EXPECT_EQ(Names(records, StepTrace::kStepsTrack),
            std::vector<std::string>({"step 2"}));
  EXPECT_EQ(Names(records, StepTrace::kPhasesTrack),
            std::vector<std::string>({"data wait", "forward", "backward",
                                      "data wait", "forward", "backward",
                                      "gradient sync", "optimizer"}));
  EXPECT_EQ(Names(records, StepTrace::kFirstBucketTrack),
            std::vector<std::string>({"allreduce"}));
  EXPECT_EQ(Names(records, StepTrace::kFirstBucketTrack + 1),
            std::vector<std::string>({"queued", "allreduce"}));
  for (const TraceRecord& r : records) {
    EXPECT_EQ(r.step, 2) << r.name;
    if (r.track == StepTrace::kStepsTrack) {
      // From the first data wait to the optimizer's end.
      EXPECT_EQ(r.start_us, absl::ToUnixMicros(Ms(12)));
      EXPECT_EQ(r.end_us, absl::ToUnixMicros(Ms(22)));
    }
    if (r.track == StepTrace::kFirstBucketTrack + 1 && r.name == "allreduce") {
      EXPECT_EQ(r.start_us, absl::ToUnixMicros(Ms(12 + 6 + 2)));
      EXPECT_EQ(r.end_us, absl::ToUnixMicros(Ms(12 + 6 + 2.8)));
      EXPECT_EQ(r.bytes, 1024);
    }
  }
}

TEST(StepTraceTest, UntimedCollectivesSpanFromLaunchToTheSyncsEnd) {
  StepTrace trace(1, 1);
  RunSteps(trace, 1, /*timed=*/false);
  for (const TraceRecord& r : trace.Records()) {
    if (r.track < StepTrace::kFirstBucketTrack) continue;
    EXPECT_EQ(r.name, "allreduce");
    EXPECT_EQ(r.end_us, absl::ToUnixMicros(Ms(9)));
    EXPECT_NE(r.text.find("does not time"), std::string::npos);
  }
}

TEST(StepTraceTest, ItsTracksPassTheFormatsRules) {
  StepTrace trace(1, 5);
  RunSteps(trace, 5);
  trace.Checkpoint(5, Ms(60), Ms(70));
  trace.Instant("failure", "[rank 0] peer lost", Ms(71));
  RankTrace part;
  part.records = trace.Records();
  const std::string json = BuildChromeTrace({part}, 1, 5).ToJson();
  absl::Status st = base::CheckChromeTrace(json, {{0}, {"steps"}});
  EXPECT_TRUE(st.ok()) << st;
}

TEST(StepTraceTest, WithoutDdpOnlyTheStepAndItsPhases) {
  StepTrace trace(1, 1);
  std::vector<TimeSpan> waits;
  trace.Step(1, Phases(0, &waits), nullptr);
  for (const TraceRecord& r : trace.Records())
    EXPECT_LT(r.track, StepTrace::kFirstBucketTrack);
  EXPECT_EQ(trace.Records().size(), 7u);  // step, 2 x (fwd, bwd), sync, opt
}

TEST(StepTraceTest, EncodesAndDecodes) {
  StepTrace trace(1, 2);
  RunSteps(trace, 2);
  trace.Instant("stall warning", "rank 1 has not joined", Ms(30));
  absl::StatusOr<std::vector<TraceRecord>> back =
      StepTrace::Decode(trace.Encode());
  ASSERT_TRUE(back.ok()) << back.status();
  const std::vector<TraceRecord> records = trace.Records();
  ASSERT_EQ(back->size(), records.size());
  for (size_t i = 0; i < records.size(); ++i) {
    EXPECT_EQ((*back)[i].name, records[i].name);
    EXPECT_EQ((*back)[i].track, records[i].track);
    EXPECT_EQ((*back)[i].start_us, records[i].start_us);
    EXPECT_EQ((*back)[i].end_us, records[i].end_us);
    EXPECT_EQ((*back)[i].instant, records[i].instant);
    EXPECT_EQ((*back)[i].bytes, records[i].bytes);
    EXPECT_EQ((*back)[i].text, records[i].text);
  }
}

TEST(StepTraceTest, DecodeRefusesDamagedBytes) {
  StepTrace trace(1, 1);
  RunSteps(trace, 1);
  const std::string bytes = trace.Encode();
  EXPECT_EQ(StepTrace::Decode("garbage").status().code(),
            absl::StatusCode::kDataLoss);
  for (size_t cut :
       {size_t{3}, size_t{12}, bytes.size() / 2, bytes.size() - 1}) {
    EXPECT_EQ(StepTrace::Decode(bytes.substr(0, cut)).status().code(),
              absl::StatusCode::kDataLoss)
        << cut;
  }
  std::string wrong = bytes;
  wrong[7] = '9';
  EXPECT_EQ(StepTrace::Decode(wrong).status().code(),
            absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace dtrain::trainer
