#include "trainer/report/live_report.h"

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace dtrain::trainer {
namespace {

using ::testing::HasSubstr;

std::vector<nlohmann::json> JsonLines(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);)
    lines.push_back(nlohmann::json::parse(line));
  return lines;
}

LiveReport::Identity Rank(int rank) {
  return {rank, /*world_size=*/2, /*local_rank=*/rank, "convnet", "gloo+shm"};
}

ReportOptions Options() {
  ReportOptions o;
  o.metrics_bind = "127.0.0.1";
  o.print_freq = 4;
  return o;
}

TEST(LiveReportTest, NothingAskedNothingDone) {
  absl::StatusOr<std::unique_ptr<LiveReport>> r =
      LiveReport::Create(Options(), Rank(0));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->metrics_url(), "");
  (*r)->StartEpoch(0, 0.1, absl::UnixEpoch());
  EXPECT_TRUE((*r)->Step(0, StepSample(), absl::UnixEpoch()).ok());
  EXPECT_TRUE((*r)->EndEpoch(EpochMetrics(), 1).ok());
}

TEST(LiveReportTest, RankZeroServesUnlessEveryRankIsAsked) {
  ReportOptions o = Options();
  o.metrics_port = 0;
  auto r0 = LiveReport::Create(o, Rank(0));
  auto r1 = LiveReport::Create(o, Rank(1));
  ASSERT_TRUE(r0.ok() && r1.ok());
  EXPECT_THAT((*r0)->metrics_url(), HasSubstr("http://127.0.0.1:"));
  EXPECT_EQ((*r1)->metrics_url(), "");
  o.metrics_ranks = "all";
  auto all1 = LiveReport::Create(o, Rank(1));
  ASSERT_TRUE(all1.ok()) << all1.status();
  EXPECT_THAT((*all1)->metrics_url(), HasSubstr("http://127.0.0.1:"));
  EXPECT_NE((*all1)->metrics_url(), (*r0)->metrics_url());
}

TEST(LiveReportTest, EveryRankServesOnPortPlusLocalRankAndABusyOneIsNamed) {
  ReportOptions o = Options();
  o.metrics_port = 0;
  auto holder = LiveReport::Create(o, Rank(0));
  ASSERT_TRUE(holder.ok()) << holder.status();
  const std::string url = (*holder)->metrics_url();
  const int busy = std::stoi(url.substr(url.rfind(':') + 1));
  // Local rank 1 with base port busy - 1 wants exactly the busy port.
  o.metrics_port = busy - 1;
  o.metrics_ranks = "all";
  auto clash = LiveReport::Create(o, Rank(1));
  ASSERT_FALSE(clash.ok());
  EXPECT_THAT(clash.status().message(),
              HasSubstr(absl::StrCat("--metrics_port=", busy - 1,
                                     " (+ local rank 1): cannot serve metrics "
                                     "on 127.0.0.1:",
                                     busy, ": Address already in use")));
}

TEST(LiveReportTest, LogsEveryPrintFreqBatchesAndEachEpoch) {
  const std::string dir = ::testing::TempDir();
  ReportOptions o = Options();
  o.log_jsonl = absl::StrCat(dir, "/report.{rank}.jsonl");
  for (int rank = 0; rank < 2; ++rank)
    std::remove(StepLogPath(o.log_jsonl, rank).c_str());
  auto r = LiveReport::Create(o, Rank(1));
  ASSERT_TRUE(r.ok()) << r.status();
  const absl::Time start = absl::FromUnixSeconds(1795600000);
  (*r)->StartEpoch(3, 0.25, start);
  // 10 batches of 8 examples, one a second: lines for batches 0, 4 and 8.
  for (int b = 0; b < 10; ++b) {
    StepSample s;
    s.samples = 8;
    s.loss = 1.0 / (b + 1);
    s.step_seconds = 0.5;
    s.global_step = 100 + b + 1;
    s.learning_rate = 0.25;
    ASSERT_TRUE((*r)->Step(b, s, start + absl::Seconds(b + 1)).ok());
  }
  EpochMetrics m;
  m.epoch = 3;
  m.steps = 10;
  m.lr = 0.25;
  m.train_loss = 0.3;
  m.samples_per_second = 16;
  ASSERT_TRUE((*r)->EndEpoch(m, 110).ok());

  const std::vector<nlohmann::json> lines =
      JsonLines(StepLogPath(o.log_jsonl, 1));
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0]["batch"], 0);
  EXPECT_EQ(lines[1]["batch"], 4);
  EXPECT_EQ(lines[2]["batch"], 8);
  EXPECT_EQ(lines[2]["step"], 109);
  EXPECT_EQ(lines[2]["rank"], 1);
  EXPECT_EQ(lines[2]["epoch"], 3);
  EXPECT_DOUBLE_EQ(lines[2]["lr"].get<double>(), 0.25);
  EXPECT_NEAR(lines[2]["loss"].get<double>(), 1.0 / 9, 1e-9);  // %.9g
  // 9 batches of 8 in 9 s.
  EXPECT_DOUBLE_EQ(lines[2]["samples_per_second"].get<double>(), 8.0);
  EXPECT_DOUBLE_EQ(lines[2]["time"].get<double>(), 1795600009.0);
  EXPECT_EQ(lines[3]["event"], "epoch");
  EXPECT_EQ(lines[3]["step"], 110);
  EXPECT_DOUBLE_EQ(lines[3]["loss"].get<double>(), 0.3);
  EXPECT_DOUBLE_EQ(lines[3]["samples_per_second"].get<double>(), 16);
  // Rank 0 was not asked to log to its file here.
  EXPECT_FALSE(std::ifstream(StepLogPath(o.log_jsonl, 0)).good());
}

}  // namespace
}  // namespace dtrain::trainer
