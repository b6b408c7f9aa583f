#include "experiments/results.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace dtrain::experiments {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

RunRecord Record(int world_size, bool sync, double samples_per_second,
                 int repeat = 0, const std::string& backend = "gloo",
                 const std::string& implementation = "dtrain") {
  RunRecord r;
  r.config.implementation = implementation;
  r.config.backend = backend;
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
  const std::string table = FormatTable(rows, Machine{2, "", 1});
  EXPECT_THAT(table, HasSubstr("FAILED"));
  EXPECT_THAT(table, HasSubstr("speedup"));
  const nlohmann::json json = nlohmann::json::parse(
      ToJson(rows, {bad}, {"nccl: no CUDA device"}, Machine{2, "", 1}));
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
  // The new columns at the end: min and max over repeats, the baseline.
  EXPECT_THAT(csv, HasSubstr(",wall_seconds,samples_per_second_min,"
                             "samples_per_second_max,"
                             "speedup_baseline_samples_per_second\n"));
  EXPECT_THAT(csv, HasSubstr(",4800,4800,3000\n"));
}

// Each backend's own one-process run would move a speedup with that run's
// noise: every row of a model divides by one baseline, the one-process runs
// of every CPU backend pooled (they are the same training).
TEST(ResultsTest, SpeedupIsOverOneBaselinePerModel) {
  std::vector<ResultRow> rows = Summarize(
      {Record(1, true, 3000, 0, "gloo"), Record(1, true, 2600, 0, "gloo+shm"),
       Record(2, true, 4200, 0, "gloo"), Record(2, true, 4900, 0, "gloo+shm")});
  ASSERT_EQ(rows.size(), 4u);
  for (const ResultRow& r : rows) {
    ASSERT_TRUE(r.speedup_baseline.has_value()) << r.backend;
    EXPECT_DOUBLE_EQ(*r.speedup_baseline, 2800);  // median of 3000 and 2600
  }
  EXPECT_DOUBLE_EQ(*rows[0].speedup, 3000.0 / 2800);
  EXPECT_DOUBLE_EQ(*rows[1].speedup, 2600.0 / 2800);
  EXPECT_DOUBLE_EQ(*rows[3].speedup, 4900.0 / 2800);
  EXPECT_DOUBLE_EQ(*rows[3].efficiency, 4900.0 / 2800 / 2);
  const std::vector<SpeedupBaseline> baselines = SpeedupBaselines(rows);
  ASSERT_EQ(baselines.size(), 1u);
  EXPECT_EQ(baselines[0].model, "convnet");
  EXPECT_EQ(baselines[0].device, "cpu");
  EXPECT_EQ(baselines[0].implementation, "dtrain");
  EXPECT_EQ(baselines[0].runs, 2);
  const std::string table = FormatTable(rows, Machine{2, "", 1});
  EXPECT_THAT(table, HasSubstr("speedup: over one baseline per model, the "
                               "fastest implementation's one-process"));
  EXPECT_THAT(table, HasSubstr("convnet 2800 samples/s (dtrain, 2 runs)"));

  // A faster implementation's one-process runs set the baseline for all,
  // its own one-process row at 1.00x and ours below.
  rows = Summarize({Record(1, true, 3000, 0, "gloo"),
                    Record(1, true, 3500, 0, "gloo", "pytorch"),
                    Record(2, true, 4200, 0, "gloo", "pytorch")});
  EXPECT_DOUBLE_EQ(*rows[0].speedup, 3000.0 / 3500);
  EXPECT_DOUBLE_EQ(*rows[1].speedup, 1.0);
  EXPECT_DOUBLE_EQ(*rows[2].speedup, 1.2);
  EXPECT_THAT(FormatTable(rows, Machine{2, "", 1}),
              HasSubstr("convnet 3500 samples/s (pytorch, 1 run)"));

  // NCCL trains on the GPU: its own baseline, never the CPU's.
  rows = Summarize({Record(1, true, 3000, 0, "gloo"),
                    Record(1, true, 9000, 0, "nccl"),
                    Record(2, true, 16200, 0, "nccl")});
  EXPECT_DOUBLE_EQ(*rows[0].speedup, 1.0);
  EXPECT_DOUBLE_EQ(*rows[2].speedup, 1.8);
  EXPECT_EQ(SpeedupBaselines(rows).size(), 2u);

  // No one-process run (a multi-node sweep from 2): no speedup, said so.
  rows = Summarize({Record(2, true, 4200)});
  EXPECT_FALSE(rows[0].speedup.has_value());
  EXPECT_THAT(FormatTable(rows, Machine{2, "", 1}),
              HasSubstr("none (no one-process run)"));
}

TEST(ResultsTest, TableHeaderNamesTheCoresAndMarksProcessesBeyondThem) {
  const std::vector<ResultRow> rows = Summarize(
      {Record(1, true, 3000), Record(2, true, 4800), Record(2, false, 5000),
       Record(4, true, 4000), Record(4, false, 3800)});
  const std::string table = FormatTable(rows, Machine{2, "AMD EPYC", 1});
  EXPECT_THAT(table, HasSubstr("machine: 2 cores (AMD EPYC)\n"));
  // 4 processes on 2 cores are marked and explained; 2 are not.
  EXPECT_THAT(table, HasSubstr(" 4*  "));
  EXPECT_THAT(table, Not(HasSubstr(" 2*  ")));
  EXPECT_THAT(table, HasSubstr("* more processes per node than the "
                               "machine's 2 cores: they take turns on the "
                               "cores"));
  // 105% of the no-communication bound, and the legend says how.
  EXPECT_THAT(table, HasSubstr("105%"));
  EXPECT_THAT(table, HasSubstr("It can exceed 100%: the bound is a separate "
                               "run"));

  // Enough cores, or the processes spread over nodes: nothing marked.
  for (const Machine& m : {Machine{4, "", 1}, Machine{2, "", 2}}) {
    const std::string t = FormatTable(rows, m);
    EXPECT_THAT(t, Not(HasSubstr("4*"))) << m.cores << " " << m.nnodes;
    EXPECT_THAT(t, Not(HasSubstr("more processes per node")));
  }
  EXPECT_THAT(FormatTable(rows, Machine{2, "", 2}),
              HasSubstr("machine: 2 cores on node 0, 2 nodes\n"));
  // The simulated cluster: its nodes share one machine's cores, so 4
  // processes over 2 nodes are still 4 on 2 cores.
  const std::string shared = FormatTable(rows, Machine{2, "", 2, true});
  EXPECT_THAT(shared, HasSubstr("machine: 2 cores, shared by all 2 nodes "
                                "(one machine)\n"));
  EXPECT_THAT(shared, HasSubstr(" 4*  "));
  EXPECT_THAT(shared, HasSubstr("* more processes than the machine's 2 "
                                "cores"));
  EXPECT_EQ(DescribeCores(Machine{0, "", 1}), "unknown cores");
  EXPECT_EQ(DescribeCores(Machine{1, "x", 1}), "1 core (x)");
}

TEST(ResultsTest, TableSaysSingleRunOrGivesTheSpread) {
  std::string table =
      FormatTable(Summarize({Record(1, true, 3000), Record(2, true, 4800)}),
                  Machine{2, "", 1});
  EXPECT_THAT(table, HasSubstr("runs: single run per configuration "
                               "(--repeats=1): the spread is unknown"));
  EXPECT_THAT(table, HasSubstr("  1 run  "));

  table =
      FormatTable(Summarize({Record(1, true, 3000, 0), Record(1, true, 2000, 1),
                             Record(1, true, 2500, 2)}),
                  Machine{2, "", 1});
  EXPECT_THAT(table, HasSubstr("runs: median of up to 3 runs per "
                               "configuration"));
  EXPECT_THAT(table, HasSubstr("40% of 3"));  // (3000 - 2000) / 2500
  EXPECT_THAT(table, Not(HasSubstr("single run")));
}

TEST(ResultsTest, ThisMachineCountsItsCores) {
  const Machine m = ThisMachine(3);
  EXPECT_GE(m.cores, 1);
  EXPECT_EQ(m.nnodes, 3);
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(ResultsTest, WriteResultsSavesTheTableAsPrinted) {
  const std::string dir = std::getenv("TEST_TMPDIR");
  const std::vector<RunRecord> records = {Record(1, true, 3000),
                                          Record(2, true, 4800)};
  const std::vector<ResultRow> rows = Summarize(records);
  const Machine machine{2, "AMD EPYC", 1};
  absl::StatusOr<std::vector<std::string>> paths =
      WriteResults(dir, rows, records, {"nccl: no CUDA device"}, machine);
  ASSERT_TRUE(paths.ok()) << paths.status();
  ASSERT_EQ(paths->size(), 3u);
  EXPECT_EQ((*paths)[0], dir + "/table.txt");
  const std::string table = ReadAll(dir + "/table.txt");
  EXPECT_EQ(table, TableText(rows, machine, {"nccl: no CUDA device"}));
  EXPECT_THAT(table, HasSubstr("machine: 2 cores (AMD EPYC)"));
  EXPECT_THAT(table, HasSubstr("\nskipped nccl: no CUDA device\n"));
  EXPECT_EQ(ReadAll(dir + "/results.csv"), ToCsv(rows));
  const nlohmann::json json =
      nlohmann::json::parse(ReadAll(dir + "/results.json"));
  EXPECT_EQ(json["machine"]["cores"], 2);
  EXPECT_EQ(json["machine"]["cpu_model"], "AMD EPYC");
  EXPECT_EQ(json["repeats"], "single run per configuration");
  EXPECT_EQ(json["speedup_baselines"][0]["samples_per_second"], 3000.0);
  EXPECT_EQ(json["results"][1]["speedup_baseline_samples_per_second"], 3000.0);

  // A directory that does not exist: the error names the file.
  paths = WriteResults(dir + "/no/such/dir", rows, records, {}, machine);
  ASSERT_FALSE(paths.ok());
  EXPECT_THAT(paths.status().message(), HasSubstr("table.txt"));
}

}  // namespace
}  // namespace dtrain::experiments
