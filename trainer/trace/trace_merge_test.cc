#include "trainer/trace/trace_merge.h"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/atomic_file.h"
#include "base/chrome_trace.h"
#include "dist/store/hash_store.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace dtrain::trainer {
namespace {

using Json = nlohmann::json;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
}

// Rank r's trace: three steps of a data wait, forward, backward, sync and
// optimizer, 1 ms each, from now.
std::unique_ptr<StepTrace> RankSteps() {
  auto trace = std::make_unique<StepTrace>(1, 3);
  absl::Time t = absl::Now();
  auto next = [&t] { return t += absl::Milliseconds(1); };
  for (int step = 1; step <= 3; ++step) {
    const absl::Time wait = t;
    trace->DataWait(wait, next());
    StepPhases p;
    p.forward.push_back({t, next()});
    p.backward.push_back({t, next()});
    p.synchronize.start = t;
    p.synchronize.end = next();
    p.optimizer.start = t;
    p.optimizer.end = next();
    trace->Step(step, p, nullptr);
  }
  return trace;
}

// Merges with `world` ranks as threads; `absent` ranks never call.
std::string Merge(int world, const std::vector<int>& absent,
                  absl::Duration timeout) {
  store::HashStore store;
  const std::string path = TempPath(absl::StrCat("trace_", world, ".json"));
  std::vector<std::thread> ranks;
  std::vector<absl::Status> results(world);
  for (int r = 0; r < world; ++r) {
    if (std::find(absent.begin(), absent.end(), r) != absent.end()) continue;
    ranks.emplace_back([&, r] {
      std::unique_ptr<StepTrace> trace = RankSteps();
      TraceMergeSetup setup;
      setup.rank = r;
      setup.world_size = world;
      setup.store = &store;
      setup.path = path;
      setup.timeout = timeout;
      results[r] = MergeTrace(*trace, setup);
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int r = 0; r < world; ++r) EXPECT_TRUE(results[r].ok()) << results[r];
  absl::StatusOr<std::string> json =
      base::ReadFile(path, {"a trace", int64_t{1} << 30});
  EXPECT_TRUE(json.ok()) << json.status();
  return json.value_or("");
}

class TraceMergeTest : public ::testing::TestWithParam<int> {};

TEST_P(TraceMergeTest, EveryRankOnRankZerosClockWithinTheStatedError) {
  const int world = GetParam();
  const std::string json = Merge(world, {}, absl::Seconds(20));
  base::TraceExpectations expect;
  for (int r = 0; r < world; ++r) {
    expect.pids.push_back(r);
    expect.notes.push_back(absl::StrCat("clock_offset_us/rank", r));
    expect.notes.push_back(absl::StrCat("clock_error_us/rank", r));
  }
  expect.notes.push_back("clock_alignment");
  absl::Status st = base::CheckChromeTrace(json, expect);
  ASSERT_TRUE(st.ok()) << st;
  const Json other = Json::parse(json)["otherData"];
  EXPECT_FALSE(other.contains("missing"));
  EXPECT_EQ(other["steps"], "1:3");
  for (int r = 1; r < world; ++r) {
    int64_t offset = 0, error = 0;
    ASSERT_TRUE(absl::SimpleAtoi(
        other[absl::StrCat("clock_offset_us/rank", r)].get<std::string>(),
        &offset));
    ASSERT_TRUE(absl::SimpleAtoi(
        other[absl::StrCat("clock_error_us/rank", r)].get<std::string>(),
        &error));
    // One host, one clock: the true offset is 0 (1 us of rounding).
    EXPECT_LE(std::abs(offset), error + 1) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, TraceMergeTest, ::testing::Values(2, 4));

TEST(TraceMergeFailureTest, ARankThatNeverCameIsNamedAndTheOthersKept) {
  const std::string json = Merge(3, {2}, absl::Milliseconds(500));
  const Json other = Json::parse(json)["otherData"];
  ASSERT_TRUE(other.contains("missing"));
  EXPECT_NE(other["missing"].get<std::string>().find("rank 2: sent no trace"),
            std::string::npos)
      << other["missing"];
  EXPECT_TRUE(base::CheckChromeTrace(json, {{0, 1}, {}}).ok());
  // Rank 2 is named but has nothing: the check for every rank fails.
  EXPECT_FALSE(base::CheckChromeTrace(json, {{0, 1, 2}, {}}).ok());
}

// Rank 0 gathers the parts before it measures any clock: a missing rank in
// the middle costs the ranks after it nothing.
TEST(TraceMergeFailureTest, AMissingMiddleRankLeavesTheOthersAligned) {
  const std::string json = Merge(4, {1}, absl::Milliseconds(500));
  const Json other = Json::parse(json)["otherData"];
  EXPECT_NE(other["missing"].get<std::string>().find("rank 1: sent no trace"),
            std::string::npos);
  EXPECT_EQ(other["missing"].get<std::string>().find("rank 2"),
            std::string::npos)
      << other["missing"];
  for (const char* r : {"rank2", "rank3"}) {
    EXPECT_NE(other[absl::StrCat("clock_offset_us/", r)], "unknown") << r;
  }
  EXPECT_TRUE(base::CheckChromeTrace(json, {{0, 2, 3}, {}}).ok());
}

// A rank that sent its part and left before its clock was measured: its
// records are kept, its clock is "unknown", and the file says why.
TEST(TraceMergeFailureTest, AnUnmeasuredClockIsUnknownNotZero) {
  store::HashStore store;
  ASSERT_TRUE(store.Set("trace/part/1", RankSteps()->Encode()).ok());
  TraceMergeSetup setup;
  setup.world_size = 2;
  setup.store = &store;
  setup.path = TempPath("unmeasured.json");
  setup.timeout = absl::Milliseconds(300);
  ASSERT_TRUE(MergeTrace(*RankSteps(), setup).ok());
  absl::StatusOr<std::string> json =
      base::ReadFile(setup.path, {"a trace", int64_t{1} << 30});
  ASSERT_TRUE(json.ok());
  const Json other = Json::parse(*json)["otherData"];
  EXPECT_EQ(other["clock_offset_us/rank1"], "unknown");
  EXPECT_EQ(other["clock_error_us/rank1"], "unknown");
  EXPECT_NE(other["missing"].get<std::string>().find(
                "rank 1: its clock could not be measured"),
            std::string::npos)
      << other["missing"];
  EXPECT_TRUE(base::CheckChromeTrace(*json, {{0, 1}, {}}).ok());
}

TEST(TraceMergeFailureTest, AnotherRanksGarbageIsNamed) {
  store::HashStore store;
  ASSERT_TRUE(store.Set("trace/part/1", "not a trace").ok());
  TraceMergeSetup setup;
  setup.world_size = 2;
  setup.store = &store;
  setup.path = TempPath("garbage.json");
  setup.timeout = absl::Milliseconds(300);
  ASSERT_TRUE(MergeTrace(*RankSteps(), setup).ok());
  absl::StatusOr<std::string> json =
      base::ReadFile(setup.path, {"a trace", int64_t{1} << 30});
  ASSERT_TRUE(json.ok());
  const std::string missing =
      Json::parse(*json)["otherData"]["missing"].get<std::string>();
  EXPECT_NE(missing.find("rank 1: malformed trace"), std::string::npos)
      << missing;
}

TEST(TraceMergeFailureTest, AnUnwritablePathIsAnErrorNamingTheFlag) {
  store::HashStore store;
  TraceMergeSetup setup;
  setup.store = &store;
  setup.path = "/nonexistent/dir/trace.json";
  absl::Status st = MergeTrace(*RankSteps(), setup);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("--trace"), std::string::npos) << st;
}

TEST(TraceMergeFailureTest, ARankWithoutRankZeroFailsSayingWhat) {
  store::HashStore store;
  TraceMergeSetup setup;
  setup.rank = 1;
  setup.world_size = 2;
  setup.store = &store;
  setup.timeout = absl::Milliseconds(100);
  absl::Status st = MergeTrace(*RankSteps(), setup);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(
      st.message().find("waiting for rank 0 to measure this rank's clock"),
      std::string::npos)
      << st;
}

TEST(TraceMergeFailureTest, AFolderThatCannotBeWrittenIsRefusedBeforehand) {
  EXPECT_TRUE(CheckTracePath(TempPath("ok.json")).ok());
  EXPECT_TRUE(CheckTracePath("relative.json").ok());
  absl::Status st = CheckTracePath("/nonexistent/dir/trace.json");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("--trace=/nonexistent/dir/trace.json: cannot "
                              "write in /nonexistent/dir"),
            std::string::npos)
      << st;
}

}  // namespace
}  // namespace dtrain::trainer
