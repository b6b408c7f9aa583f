#include "base/chrome_trace.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace dtrain::base {
namespace {

using ::testing::HasSubstr;

TraceSlice Slice(const std::string& name, int64_t start, int64_t duration,
                 int pid, int tid) {
  TraceSlice s;
  s.name = name;
  s.category = "step";
  s.start_us = start;
  s.duration_us = duration;
  s.pid = pid;
  s.tid = tid;
  return s;
}

// Two ranks, each with a step track and a bucket track: what a training run
// writes.
ChromeTrace TwoRanks() {
  ChromeTrace trace;
  for (int rank = 0; rank < 2; ++rank) {
    trace.NameProcess(rank, "rank " + std::to_string(rank));
    trace.NameTrack(rank, 0, "step");
    trace.NameTrack(rank, 1, "bucket 0");
    trace.Add(Slice("forward", 100, 50, rank, 0));
    trace.Add(Slice("backward", 150, 80, rank, 0));
    TraceSlice bucket = Slice("allreduce", 200, 60, rank, 1);
    bucket.numbers = {{"bytes", 4096}, {"seq", 3}};
    bucket.texts = {{"op", "sum"}};
    trace.Add(bucket);
  }
  TraceInstant stall;
  stall.name = "stall warning";
  stall.at_us = 210;
  stall.pid = 1;
  stall.texts = {{"detail", "rank 0 has not joined allreduce #3"}};
  trace.Add(stall);
  trace.SetNote("clock_error_us", "12");
  return trace;
}

TEST(ChromeTraceTest, WritesTheFormatsObjectWithNamesFirst) {
  const nlohmann::json j = nlohmann::json::parse(TwoRanks().ToJson());
  ASSERT_TRUE(j.contains("traceEvents"));
  EXPECT_EQ(j["displayTimeUnit"], "ms");
  EXPECT_EQ(j["otherData"]["clock_error_us"], "12");
  const nlohmann::json& events = j["traceEvents"];
  // 2 processes x (name, sort index) + 4 tracks x (name, sort index), then 6
  // slices and an instant.
  ASSERT_EQ(events.size(), 4u + 8u + 6u + 1u);
  EXPECT_EQ(events[0]["ph"], "M");
  EXPECT_EQ(events[0]["name"], "process_name");
  EXPECT_EQ(events[0]["args"]["name"], "rank 0");
  const nlohmann::json& bucket = events[14];
  EXPECT_EQ(bucket["ph"], "X");
  EXPECT_EQ(bucket["name"], "allreduce");
  EXPECT_EQ(bucket["ts"], 200);
  EXPECT_EQ(bucket["dur"], 60);
  EXPECT_EQ(bucket["args"]["bytes"], 4096);
  EXPECT_EQ(bucket["args"]["op"], "sum");
  EXPECT_EQ(events.back()["ph"], "i");
  EXPECT_EQ(events.back()["s"], "t");
}

TEST(ChromeTraceTest, ItsOwnTraceKeepsEveryRule) {
  TraceExpectations expect;
  expect.pids = {0, 1};
  expect.notes = {"clock_error_us"};
  EXPECT_TRUE(CheckChromeTrace(TwoRanks().ToJson(), expect).ok());
}

TEST(ChromeTraceTest, SlicesThatTouchDoNotOverlap) {
  ChromeTrace trace;
  trace.NameProcess(0, "rank 0");
  trace.Add(Slice("a", 0, 10, 0, 0));
  trace.Add(Slice("b", 10, 10, 0, 0));
  trace.Add(Slice("c", 5, 10, 0, 1));  // Another track.
  EXPECT_TRUE(CheckChromeTrace(trace.ToJson()).ok());
}

TEST(ChromeTraceTest, OverlapOnATrackIsNamed) {
  ChromeTrace trace;
  trace.Add(Slice("backward", 150, 80, 3, 0));
  trace.Add(Slice("forward", 100, 60, 3, 0));
  const absl::Status s = CheckChromeTrace(trace.ToJson());
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("('backward'): overlaps traceEvents[1] ('forward') on "
                        "track (pid 3, tid 0): it starts at 150 us, before "
                        "that one's end at 160 us"));
}

TEST(ChromeTraceTest, MissingRanksAndNotesAreNamed) {
  ChromeTrace trace;
  trace.NameProcess(0, "rank 0");
  trace.Add(Slice("forward", 0, 1, 0, 0));
  trace.NameProcess(1, "rank 1");
  TraceExpectations expect;
  expect.pids = {0, 1};
  EXPECT_THAT(std::string(CheckChromeTrace(trace.ToJson(), expect).message()),
              HasSubstr("process 1 has no slices"));
  expect.pids = {0, 2};
  EXPECT_THAT(std::string(CheckChromeTrace(trace.ToJson(), expect).message()),
              HasSubstr("process 2 has no name"));
  expect.pids = {0};
  expect.notes = {"clock_error_us"};
  EXPECT_THAT(std::string(CheckChromeTrace(trace.ToJson(), expect).message()),
              HasSubstr("no \"clock_error_us\" in \"otherData\""));
}

TEST(ChromeTraceTest, TheFormatsRulesAreChecked) {
  struct Case {
    const char* json;
    const char* error;
  };
  const Case cases[] = {
      {"", "not JSON"},
      {"{\"traceEvents\": 3}", "without a \"traceEvents\" array"},
      {"7", "neither an object nor an array"},
      {"[1]", "traceEvents[0]: not an object"},
      {"[{\"name\": \"a\", \"pid\": 0, \"tid\": 0, \"ts\": 0}]", "no phase"},
      {"[{\"ph\": \"X\", \"pid\": 0, \"tid\": 0, \"ts\": 0, \"dur\": 1}]",
       "no name"},
      {"[{\"ph\": \"X\", \"name\": \"a\", \"tid\": 0, \"ts\": 0, \"dur\": 1}]",
       "no integer \"pid\""},
      {"[{\"ph\": \"X\", \"name\": \"a\", \"pid\": 0, \"ts\": 0, \"dur\": 1}]",
       "no integer \"tid\""},
      {"[{\"ph\": \"X\", \"name\": \"a\", \"pid\": 0, \"tid\": 0, \"ts\": -1, "
       "\"dur\": 1}]",
       "no timestamp"},
      {"[{\"ph\": \"X\", \"name\": \"a\", \"pid\": 0, \"tid\": 0, \"ts\": 0}]",
       "without \"dur\""},
      {"[{\"ph\": \"i\", \"name\": \"a\", \"pid\": 0, \"tid\": 0, \"ts\": 0, "
       "\"s\": \"x\"}]",
       "scope \"s\" is not g, p or t"},
      {"[{\"ph\": \"E\", \"name\": \"a\", \"pid\": 0, \"tid\": 0, \"ts\": 0}]",
       "an end (\"E\") with no begin"},
      {"[{\"ph\": \"Q\", \"name\": \"a\", \"pid\": 0, \"tid\": 0, \"ts\": 0}]",
       "an unknown phase 'Q'"},
      {"[{\"ph\": \"M\", \"name\": \"colour\", \"pid\": 0, \"args\": {}}]",
       "an unknown metadata event"},
      {"[{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": 0}]",
       "metadata without \"args\""},
      {"[{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": 0, \"args\": "
       "{}}]",
       "process_name without args.name"},
      {"[{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": 0, \"args\": "
       "{\"name\": \"t\"}}]",
       "thread metadata without an integer \"tid\""},
  };
  for (const Case& c : cases) {
    const absl::Status s = CheckChromeTrace(c.json);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << c.json;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.error)) << c.json;
  }
  // The bare array form, with a begin and its end.
  EXPECT_TRUE(CheckChromeTrace("[{\"ph\": \"B\", \"name\": \"a\", \"pid\": 0, "
                               "\"tid\": 0, \"ts\": 0}, {\"ph\": \"E\", "
                               "\"name\": \"a\", \"pid\": 0, \"tid\": 0, "
                               "\"ts\": 5}]")
                  .ok());
}

}  // namespace
}  // namespace dtrain::base
