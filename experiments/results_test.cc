#include "experiments/results.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace dtrain::experiments {
namespace {

using ::testing::HasSubstr;

RunRecord Record(int world_size, bool sync, double samples_per_second,
                 int repeat = 0) {
  RunRecord r;
  r.config.implementation = "dtrain";
  r.config.backend = "gloo";
  r.config.model = "convnet";
  r.config.world_size = world_size;
  r.config.batch_size = 128 / world_size;
  r.config.sync_gradients = sync;
  r.config.repeat = repeat;
  r.ok = true;
  r.samples = 60000;
  r.samples_per_second = samples_per_second;
  r.epoch_seconds = 60000 / samples_per_second;
  r.exposed_communication_seconds = world_size > 1 && sync ? 1.5 : 0;
  r.wall_seconds = r.epoch_seconds + 1;
  r.step_histogram = {0, 0, 0, 0, 3, 2, 0, 0, 0, 0, 0, 0, 0, 0};
  r.step_seconds_sum = 0.1;
  return r;
}

TEST(ResultsTest, SpeedupAndBothEfficiencies) {
  const std::vector<ResultRow> rows = Summarize(
      {Record(1, true, 3000), Record(2, true, 4800), Record(2, false, 5000),
       Record(4, true, 5400), Record(4, false, 6000)});
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].world_size, 1);
  EXPECT_DOUBLE_EQ(*rows[0].speedup, 1.0);
  EXPECT_DOUBLE_EQ(*rows[1].speedup, 1.6);
  EXPECT_DOUBLE_EQ(*rows[1].efficiency, 0.8);
  EXPECT_DOUBLE_EQ(*rows[1].communication_efficiency, 0.96);
  EXPECT_DOUBLE_EQ(*rows[1].bound_samples_per_second, 5000);
  EXPECT_DOUBLE_EQ(rows[1].exposed_share, 1.5 / 12.5);
  EXPECT_DOUBLE_EQ(*rows[2].speedup, 1.8);
  EXPECT_DOUBLE_EQ(*rows[2].efficiency, 0.45);
  EXPECT_DOUBLE_EQ(*rows[2].communication_efficiency, 0.9);
  EXPECT_EQ(rows[2].step_histogram[4], 3);
}

TEST(ResultsTest, RepeatsGiveTheMedianAndTheSpread) {
  const std::vector<ResultRow> rows =
      Summarize({Record(1, true, 3000, 0), Record(1, true, 2000, 1),
                 Record(1, true, 2800, 2)});
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].runs, 3);
  EXPECT_DOUBLE_EQ(rows[0].samples_per_second, 2800);
  EXPECT_DOUBLE_EQ(rows[0].spread, 1000.0 / 2800);
  EXPECT_EQ(rows[0].step_histogram[4], 9);  // summed over repeats
}

TEST(ResultsTest, FailuresAreCountedAndShown) {
  RunRecord bad = Record(2, true, 0);
  bad.ok = false;
  bad.error = "exit 1: [rank 1] lost";
  const std::vector<ResultRow> rows = Summarize({Record(1, true, 3000), bad});
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1].runs, 0);
  EXPECT_EQ(rows[1].failed, 1);
  EXPECT_FALSE(rows[1].speedup.has_value());
  const std::string table = FormatTable(rows);
  EXPECT_THAT(table, HasSubstr("FAILED"));
  EXPECT_THAT(table, HasSubstr("speedup"));
  const nlohmann::json json =
      nlohmann::json::parse(ToJson(rows, {bad}, {"nccl: no CUDA device"}));
  EXPECT_EQ(json["results"][1]["error"], "exit 1: [rank 1] lost");
  EXPECT_EQ(json["skipped"][0], "nccl: no CUDA device");
  EXPECT_TRUE(json["results"][1]["speedup"].is_null());
}

TEST(ResultsTest, CsvHasOneLinePerRowAndAHeader) {
  const std::string csv =
      ToCsv(Summarize({Record(1, true, 3000), Record(2, true, 4800)}));
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 3);
  EXPECT_THAT(csv, HasSubstr("implementation,backend,model,world_size"));
  EXPECT_THAT(csv,
              HasSubstr("dtrain,gloo,convnet,2,64,1,0,12.5,4800,0,1.6,0.8"));
}

}  // namespace
}  // namespace dtrain::experiments
