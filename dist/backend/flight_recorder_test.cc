#include "dist/backend/flight_recorder.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace dtrain::backend {
namespace {

using ::testing::HasSubstr;

TEST(FlightRecorderTest, NotesACollectivesLife) {
  FlightRecorder r(8);
  const int64_t t = r.Issued("gloo", 0, 1, 7, "allreduce", "sum, 4 x float32");
  ASSERT_GE(t, 0);
  std::vector<FlightEntry> e = r.Entries();
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].state, FlightEntry::State::kIssued);
  EXPECT_FALSE(e[0].started.has_value());
  r.Started(t);
  EXPECT_EQ(r.Entries()[0].state, FlightEntry::State::kStarted);
  r.Finished(t, absl::OkStatus());
  e = r.Entries();
  EXPECT_EQ(e[0].backend, "gloo");
  EXPECT_EQ(e[0].rank, 1);
  EXPECT_EQ(e[0].seq, 7);
  EXPECT_EQ(e[0].op, "allreduce");
  EXPECT_EQ(e[0].details, "sum, 4 x float32");
  EXPECT_EQ(e[0].state, FlightEntry::State::kCompleted);
  ASSERT_TRUE(e[0].started.has_value() && e[0].finished.has_value());
  EXPECT_LE(e[0].issued, *e[0].started);
  EXPECT_LE(*e[0].started, *e[0].finished);

  const int64_t failed = r.Issued("gloo", 0, 1, 8, "barrier", "");
  r.Finished(failed, absl::UnavailableError("rank 0 has exited"));
  EXPECT_EQ(r.Entries().back().state, FlightEntry::State::kFailed);
  EXPECT_EQ(r.Entries().back().error, "rank 0 has exited");
}

TEST(FlightRecorderTest, KeepsTheLastAndIgnoresOverwrittenTickets) {
  FlightRecorder r(3);
  std::vector<int64_t> tickets;
  for (int seq = 1; seq <= 5; ++seq)
    tickets.push_back(r.Issued("shm", 0, 0, seq, "allreduce", ""));
  std::vector<FlightEntry> e = r.Entries();
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[0].seq, 3);
  EXPECT_EQ(e[2].seq, 5);
  EXPECT_EQ(r.dropped(), 2);
  // Collective 1's slot now holds collective 4: finishing 1 leaves it be.
  r.Finished(tickets[0], absl::OkStatus());
  EXPECT_EQ(r.Entries()[1].seq, 4);
  EXPECT_EQ(r.Entries()[1].state, FlightEntry::State::kIssued);
}

TEST(FlightRecorderTest, OffKeepsNothing) {
  FlightRecorder r(0);
  const int64_t t = r.Issued("gloo", 0, 0, 1, "allreduce", "");
  EXPECT_EQ(t, -1);
  r.Started(t);
  r.Finished(t, absl::OkStatus());
  EXPECT_TRUE(r.Entries().empty());
  EXPECT_EQ(r.capacity(), 0u);
}

TEST(FlightRecorderTest, InstancesCountPerBackendAndRank) {
  FlightRecorder r(4);
  EXPECT_EQ(r.NextInstance("gloo", 0), 0);
  EXPECT_EQ(r.NextInstance("gloo", 0), 1);
  EXPECT_EQ(r.NextInstance("gloo", 1), 0);  // Ranks as threads.
  EXPECT_EQ(r.NextInstance("shm", 0), 0);
}

TEST(FlightRecorderTest, RanksAsThreadsShareTheRingAndDumpTheirOwn) {
  FlightRecorder r(1000);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 4; ++rank) {
    ranks.emplace_back([&r, rank] {
      for (int seq = 1; seq <= 100; ++seq) {
        const int64_t t = r.Issued("gloo", 0, rank, seq, "allreduce", "x");
        r.Started(t);
        r.Finished(t, absl::OkStatus());
      }
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int rank = 0; rank < 4; ++rank) {
    const std::vector<FlightEntry> e = r.Entries(rank);
    ASSERT_EQ(e.size(), 100u);
    for (int i = 0; i < 100; ++i) EXPECT_EQ(e[i].seq, i + 1);
  }
  const nlohmann::json dump =
      nlohmann::json::parse(FlightRecordJson(r, {2, 4, 2, "SIGUSR1"}));
  EXPECT_EQ(dump["format"], "dtrain.flight_recorder.v1");
  EXPECT_EQ(dump["rank"], 2);
  EXPECT_EQ(dump["world_size"], 4);
  EXPECT_EQ(dump["reason"], "SIGUSR1");
  EXPECT_EQ(dump["capacity"], 1000);
  ASSERT_EQ(dump["entries"].size(), 100u);
  EXPECT_EQ(dump["entries"][0]["rank"], 2);
  EXPECT_EQ(dump["entries"][0]["state"], "completed");
  EXPECT_TRUE(dump["entries"][0]["finished"].is_number());
}

TEST(FlightRecorderTest, DumpsToAFileAndNamesAPathItCannotWrite) {
  FlightRecorder r(4);
  r.Issued("gloo", 0, 0, 1, "broadcast", "root 0");
  const std::string path =
      std::string(std::getenv("TEST_TMPDIR")) + "/flight_rank0.json";
  ASSERT_TRUE(DumpFlightRecord(r, {0, 1, -1, "failure"}, path).ok());
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json dump = nlohmann::json::parse(text.str());
  EXPECT_EQ(dump["entries"][0]["op"], "broadcast");
  EXPECT_TRUE(dump["entries"][0]["started"].is_null());
  EXPECT_EQ(dump["entries"][0]["state"], "issued");

  const absl::Status s = DumpFlightRecord(r, {0, 1, -1, "failure"},
                                          "/nonexistent-dir/flight.json");
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("/nonexistent-dir"));
}

}  // namespace
}  // namespace dtrain::backend
