#include "tools/flight_analyze/flight_analysis.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "dist/backend/flight_recorder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::tools {
namespace {

using backend::FlightDumpInfo;
using backend::FlightRecorder;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Kind = FlightFinding::Kind;

// A rank's recorder: `done` collectives issued and finished, then `open`
// issued and started but never finished; collective `odd` (if any) has
// other details.
std::unique_ptr<FlightRecorder> Rank(int rank, int done, int open = 0,
                                     int odd = 0,
                                     const std::string& odd_details = "") {
  auto recorder = std::make_unique<FlightRecorder>(64);
  FlightRecorder& r = *recorder;
  for (int seq = 1; seq <= done + open; ++seq) {
    const int64_t t =
        r.Issued("gloo+shm", 0, rank, seq, "allreduce",
                 seq == odd ? odd_details : "sum, 4 x float32 = 16 B");
    r.Started(t);
    if (seq <= done) r.Finished(t, absl::OkStatus());
  }
  return recorder;
}

// Through the JSON a real dump has.
FlightDump Dump(const FlightRecorder& r, int rank, int world_size) {
  FlightDumpInfo info;
  info.rank = rank;
  info.world_size = world_size;
  info.reason = "failure";
  absl::StatusOr<FlightDump> d =
      ParseFlightDump(backend::FlightRecordJson(r, info), "rank.json");
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? *d : FlightDump();
}

TEST(FlightAnalysisTest, RanksThatAgreeHaveNoFindings) {
  const std::vector<FlightDump> dumps = {Dump(*Rank(0, 10), 0, 2),
                                         Dump(*Rank(1, 10), 1, 2)};
  EXPECT_TRUE(AnalyzeFlightDumps(dumps).empty());
  const std::string table = SummarizeFlightDumps(dumps);
  EXPECT_THAT(table, HasSubstr("gloo+shm/0"));
  EXPECT_THAT(table, HasSubstr("#10"));
}

TEST(FlightAnalysisTest, ADifferentlySizedCollectiveIsAMismatch) {
  const std::vector<FlightDump> dumps = {
      Dump(*Rank(0, 4, 1), 0, 2),
      Dump(*Rank(1, 4, 1, 5, "sum, 8 x float32 = 32 B"), 1, 2)};
  const std::vector<FlightFinding> f = AnalyzeFlightDumps(dumps);
  ASSERT_FALSE(f.empty());
  EXPECT_EQ(f[0].kind, Kind::kMismatch);
  EXPECT_EQ(f[0].backend, "gloo+shm/0");
  EXPECT_EQ(f[0].seq, 5);
  EXPECT_THAT(f[0].message,
              HasSubstr("the ranks issued different collectives as "
                        "gloo+shm/0 #5: rank 0: allreduce (sum, 4 x float32 = "
                        "16 B); rank 1: allreduce (sum, 8 x float32 = 32 B)"));
}

TEST(FlightAnalysisTest, AnExtraCollectiveOnOneRankIsAMismatchOrAMissingRank) {
  // Rank 1 issued a broadcast as its #3 where rank 0 issued the allreduce:
  // the numbers disagree from there on.
  std::unique_ptr<FlightRecorder> zero = Rank(0, 2, 1);
  FlightRecorder one(64);
  for (int seq = 1; seq <= 3; ++seq) {
    const int64_t t = one.Issued(
        "gloo+shm", 0, 1, seq, seq == 3 ? "broadcast" : "allreduce",
        seq == 3 ? "root 0, 4 x float32 = 16 B" : "sum, 4 x float32 = 16 B");
    one.Started(t);
    if (seq < 3) one.Finished(t, absl::OkStatus());
  }
  const std::vector<FlightFinding> f =
      AnalyzeFlightDumps({Dump(*zero, 0, 2), Dump(one, 1, 2)});
  ASSERT_FALSE(f.empty());
  EXPECT_EQ(f[0].kind, Kind::kMismatch);
  EXPECT_EQ(f[0].seq, 3);
  EXPECT_THAT(f[0].message, HasSubstr("rank 1: broadcast (root 0"));
}

TEST(FlightAnalysisTest, ARankBehindIsNamedWithItsLastCollective) {
  // Rank 2 never issued #7, where ranks 0 and 1 wait.
  const std::vector<FlightFinding> f =
      AnalyzeFlightDumps({Dump(*Rank(0, 6, 1), 0, 3),
                          Dump(*Rank(1, 6, 1), 1, 3), Dump(*Rank(2, 6), 2, 3)});
  ASSERT_FALSE(f.empty());
  EXPECT_EQ(f[0].kind, Kind::kMissing);
  EXPECT_EQ(f[0].seq, 7);
  EXPECT_THAT(f[0].ranks, ElementsAre(2));
  EXPECT_THAT(f[0].message,
              HasSubstr("rank 2 never issued gloo+shm/0 #7 (allreduce (sum, 4 "
                        "x float32 = 16 B)), which ranks 0, 1 issued (rank 0 "
                        "started, not finished, rank 1 started, not "
                        "finished); rank 2's last was #6"));
}

TEST(FlightAnalysisTest, ADumpWrittenBeforeTheOthersIssuedIsNoEvidence) {
  // Rank 1 dumped (SIGUSR1) before rank 0 issued its #6.
  const FlightDump early = Dump(*Rank(1, 5), 1, 2);
  absl::SleepFor(absl::Milliseconds(5));
  const FlightDump late = Dump(*Rank(0, 6), 0, 2);
  for (const FlightFinding& f : AnalyzeFlightDumps({late, early}))
    EXPECT_NE(f.kind, Kind::kMissing) << f.message;
}

TEST(FlightAnalysisTest, ARankWithoutADumpIsNamed) {
  // Rank 2 was stopped: only 0 and 1 dumped, both waiting in #7.
  const std::vector<FlightFinding> f = AnalyzeFlightDumps(
      {Dump(*Rank(0, 6, 1), 0, 3), Dump(*Rank(1, 6, 1), 1, 3)});
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].kind, Kind::kNoDump);
  EXPECT_THAT(f[0].ranks, ElementsAre(2));
  EXPECT_THAT(f[0].message,
              HasSubstr("rank 2 of 3 left no dump: stopped, killed, or never "
                        "reached a failure; the others' last collective in "
                        "common: gloo+shm/0 #7"));
  EXPECT_EQ(f[1].kind, Kind::kUnfinished);
  EXPECT_EQ(f[1].seq, 7);
  EXPECT_THAT(f[1].message, HasSubstr("ranks 0, 1 never finished it"));
}

TEST(FlightAnalysisTest, TheWorldSizeCanBeGiven) {
  const std::vector<FlightFinding> f =
      AnalyzeFlightDumps({Dump(*Rank(0, 3), 0, 0), Dump(*Rank(1, 3), 1, 0)}, 4);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_THAT(f[0].ranks, ElementsAre(2, 3));
  EXPECT_THAT(f[0].message, HasSubstr("ranks 2, 3 of 4 left no dump"));
}

TEST(FlightAnalysisTest, RingsThatDroppedDifferentAmountsCompareWhatTheyShare) {
  FlightRecorder small(4);  // Rank 1 keeps only #7..#10.
  for (int seq = 1; seq <= 10; ++seq) {
    const int64_t t = small.Issued("gloo+shm", 0, 1, seq, "allreduce",
                                   "sum, 4 x float32 = 16 B");
    small.Started(t);
    small.Finished(t, absl::OkStatus());
  }
  EXPECT_TRUE(AnalyzeFlightDumps({Dump(*Rank(0, 10), 0, 2), Dump(small, 1, 2)})
                  .empty());
}

TEST(FlightAnalysisTest, GarbageIsRefusedNamingTheFile) {
  for (const char* bad :
       {"", "[]", "{\"format\": \"other\"}",
        "{\"format\": \"dtrain.flight_recorder.v1\"}",
        "{\"format\": \"dtrain.flight_recorder.v1\", \"rank\": 0}",
        "{\"format\": \"dtrain.flight_recorder.v1\", \"rank\": 0, "
        "\"entries\": [{\"backend\": 1}]}",
        "{\"format\": \"dtrain.flight_recorder.v1\", \"rank\": 0, "
        "\"entries\": [{\"backend\": \"g\", \"op\": \"a\", \"details\": \"\", "
        "\"state\": \"lost\", \"instance\": 0, \"rank\": 0, \"seq\": 1}]}"}) {
    const absl::StatusOr<FlightDump> d = ParseFlightDump(bad, "x/flight.json");
    EXPECT_TRUE(absl::IsInvalidArgument(d.status())) << bad;
    EXPECT_THAT(std::string(d.status().message()),
                HasSubstr("x/flight.json: not a flight recorder dump"))
        << bad;
  }
}

}  // namespace
}  // namespace dtrain::tools
