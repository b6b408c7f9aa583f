#include "experiments/results.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "experiments/results_files.h"
#include "experiments/results_table.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace dtrain::experiments {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

RunRecord Record(int world_size, bool sync, double samples_per_second,
                 int repeat = 0, const std::string& backend = "gloo",
                 const std::string& implementation = "dtrain",
                 const std::string& comm_hook = kDefaultCommHook) {
  RunRecord r;
  r.config.implementation = implementation;
  r.config.backend = backend;
  r.config.model = "convnet";
  r.config.comm_hook = comm_hook;
  r.config.world_size = world_size;
  r.config.batch_size = 128 / world_size;
  r.config.sync_gradients = sync;
  r.config.repeat = repeat;
  r.ok = true;
  r.samples = 60000;
  r.steps = 500;
  r.samples_per_second = samples_per_second;
  r.epoch_seconds = 60000 / samples_per_second;
  r.step_seconds_p50 = r.epoch_seconds / r.steps * 0.9;
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
  EXPECT_THAT(csv,
              HasSubstr("implementation,backend,model,comm_hook,world_size"));
  EXPECT_THAT(csv, HasSubstr("dtrain,gloo,convnet,allreduce,2,64,1,0,12.5,"
                             "4800,0,1.6,0.8"));
  // Columns added at the end: min and max over repeats, the baseline; the
  // step with and without communication, what communication adds (also of
  // the median steps), the flags every training had, the instrumentation.
  EXPECT_THAT(csv, HasSubstr(",wall_seconds,samples_per_second_min,"
                             "samples_per_second_max,"
                             "speedup_baseline_samples_per_second,"
                             "step_seconds,no_comm_step_seconds,"
                             "communication_seconds_per_step,"
                             "no_comm_step_seconds_p50,"
                             "communication_seconds_per_step_p50,zero,"
                             "optimizer_state_bytes,peak_rss_bytes,"
                             "train_flags,instrumentation\n"));
  // No bound run at 2 processes: those stay empty. No ZeRO, and memory not
  // measured by these records.
  EXPECT_THAT(csv, HasSubstr(",4800,4800,3000,0.025,,,,,0,0,0,,default\n"));
  // One process is its own bound: communication adds nothing.
  EXPECT_THAT(
      csv, HasSubstr(",3000,3000,3000,0.04,0.04,0,0.036,0,0,0,0,,default\n"));
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

// "The time communication adds to a step": the step with gradient averaging
// minus the same step of the no-communication bound, of mean and of median
// steps.
TEST(ResultsTest, CommunicationPerStepIsTheStepMinusTheBounds) {
  RunRecord sync = Record(2, true, 4800);    // 12.5 s over 500 steps
  RunRecord bound = Record(2, false, 6000);  // 10 s
  sync.step_seconds_p50 = 0.022;
  bound.step_seconds_p50 = 0.019;
  const std::vector<ResultRow> rows = Summarize({sync, bound});
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_DOUBLE_EQ(rows[0].step_seconds, 0.025);
  EXPECT_DOUBLE_EQ(*rows[0].bound_step_seconds, 0.02);
  EXPECT_DOUBLE_EQ(*rows[0].communication_seconds_per_step, 0.005);
  EXPECT_DOUBLE_EQ(*rows[0].bound_step_seconds_p50, 0.019);
  EXPECT_NEAR(*rows[0].communication_seconds_per_step_p50, 0.003, 1e-12);
  EXPECT_DOUBLE_EQ(*rows[0].communication_efficiency, 0.8);
  const std::string table = FormatTable(rows, Machine{2, "", 1});
  EXPECT_THAT(table, HasSubstr("  5.0  "));  // comm ms/step
  EXPECT_THAT(table, HasSubstr("comm ms/step: the time communication adds to "
                               "a step"));
  const nlohmann::json json =
      nlohmann::json::parse(ToJson(rows, {sync, bound}, {}, Machine{2, "", 1}));
  EXPECT_DOUBLE_EQ(json["results"][0]["communication_seconds_per_step"], 0.005);
  EXPECT_DOUBLE_EQ(json["results"][0]["no_comm_step_seconds"], 0.02);
  EXPECT_EQ(json["runs"][1]["steps"], 500);
}

// Each hook is a configuration of its own (a row, a column of the table, CSV
// and JSON); the no-sync runs are the bound of every hook's row; every hook
// divides by the allreduce one-process baseline, so a hook's one-process row
// shows what it costs by itself (against the allreduce row, its bound there).
// ZeRO's stages are rows of their own, read against plain DDP's: the same
// baseline and bound, their memory per rank in the table, CSV and JSON.
TEST(ResultsTest, ZeroStagesAreRowsOfTheirOwnWithTheirMemory) {
  auto with = [](RunRecord r, int zero, int64_t state, int64_t rss) {
    r.config.zero = zero;
    r.optimizer_state_bytes = state;
    r.peak_rss_bytes = rss;
    return r;
  };
  constexpr int64_t kMiB = 1 << 20;
  const std::vector<RunRecord> records = {
      with(Record(1, true, 3000), 0, 40 * kMiB, 400 * kMiB),
      with(Record(1, true, 2900), 1, 40 * kMiB, 401 * kMiB),
      with(Record(2, true, 4800), 0, 40 * kMiB, 410 * kMiB),
      with(Record(2, true, 5100), 1, 20 * kMiB, 390 * kMiB),
      with(Record(2, true, 5000, 1), 1, 20 * kMiB, 392 * kMiB),
      with(Record(2, true, 5000), 2, 20 * kMiB, 388 * kMiB),
      Record(2, false, 6000),
  };
  const std::vector<ResultRow> rows = Summarize(records);
  ASSERT_EQ(rows.size(), 5u);
  EXPECT_EQ(rows[1].zero, 1);
  EXPECT_EQ(Variant(rows[1]), "allreduce zero1");
  EXPECT_EQ(Variant(rows[2]), "allreduce");
  EXPECT_EQ(rows[3].runs, 2);
  EXPECT_EQ(rows[3].optimizer_state_bytes, 20 * kMiB);
  EXPECT_EQ(rows[3].peak_rss_bytes, 391 * kMiB);  // the median of 390, 392
  // One baseline, plain DDP's one-process run.
  const std::vector<SpeedupBaseline> baselines = SpeedupBaselines(rows);
  ASSERT_EQ(baselines.size(), 1u);
  EXPECT_DOUBLE_EQ(baselines[0].samples_per_second, 3000);
  EXPECT_DOUBLE_EQ(*rows[3].speedup, 5050.0 / 3000);
  EXPECT_DOUBLE_EQ(*rows[4].speedup, 5000.0 / 3000);
  // The no-sync run bounds every stage; at 1 process plain DDP's row does.
  EXPECT_DOUBLE_EQ(*rows[4].communication_efficiency, 5000.0 / 6000);
  EXPECT_DOUBLE_EQ(*rows[1].bound_samples_per_second, 3000);

  const std::string table = FormatTable(rows, Machine{2, "", 1});
  EXPECT_THAT(table, HasSubstr("allreduce zero1"));
  EXPECT_THAT(table, HasSubstr("state MiB"));
  EXPECT_THAT(table, HasSubstr("zero1 shards the optimizer state"));
  EXPECT_THAT(table, HasSubstr("20.0     391.0\n"));
  EXPECT_THAT(ToCsv(rows), HasSubstr(absl::StrCat(",1,", 20 * kMiB, ",",
                                                  391 * kMiB, ",,default\n")));
  const nlohmann::json json =
      nlohmann::json::parse(ToJson(rows, records, {}, Machine{2, "", 1}));
  EXPECT_EQ(json["results"][3]["zero"], 1);
  EXPECT_EQ(json["results"][3]["peak_rss_bytes"], 391 * kMiB);
  EXPECT_EQ(json["runs"][5]["zero"], 2);
  // Without ZeRO the table keeps its columns.
  EXPECT_THAT(
      FormatTable(Summarize({Record(1, true, 3000)}), Machine{2, "", 1}),
      Not(HasSubstr("state MiB")));
}

TEST(ResultsTest, InstrumentationsAreRowsMeasuredAgainstTheDefaults) {
  auto with = [](RunRecord r, const std::string& instrumentation) {
    r.config.instrumentation = instrumentation;
    return r;
  };
  const std::vector<RunRecord> records = {
      Record(1, true, 3000),
      with(Record(1, true, 2000), "trace"),  // not a baseline
      Record(2, true, 5000),
      with(Record(2, true, 4950), "trace"),
      with(Record(2, true, 5050), "no_flight_recorder"),
      Record(2, false, 6000),
  };
  const std::vector<ResultRow> rows = Summarize(records);
  ASSERT_EQ(rows.size(), 5u);
  EXPECT_EQ(rows[3].instrumentation, "trace");
  EXPECT_EQ(Variant(rows[3]), "allreduce trace");
  const std::vector<SpeedupBaseline> baselines = SpeedupBaselines(rows);
  ASSERT_EQ(baselines.size(), 1u);
  EXPECT_DOUBLE_EQ(baselines[0].samples_per_second, 3000);
  // The default's one-process row bounds the trace's at one process.
  EXPECT_DOUBLE_EQ(*rows[1].bound_samples_per_second, 3000);

  const std::string table = FormatTable(rows, Machine{2, "", 1});
  EXPECT_THAT(table, HasSubstr("instrumentation: what it costs"));
  // Step time 60000 / 4950 / 500 s against 60000 / 5000 / 500 s: +1.0%.
  EXPECT_THAT(table, HasSubstr("+1.0%"));
  EXPECT_THAT(table, HasSubstr("-1.0%"));  // samples/s of the trace
  EXPECT_THAT(table, HasSubstr("no_flight_recorder"));
  EXPECT_THAT(ToCsv(rows), HasSubstr(",trace\n"));
  const nlohmann::json json =
      nlohmann::json::parse(ToJson(rows, records, {}, Machine{2, "", 1}));
  EXPECT_EQ(json["results"][3]["instrumentation"], "trace");
  // Without other instrumentations no such table.
  EXPECT_THAT(
      FormatTable(Summarize({Record(1, true, 3000)}), Machine{2, "", 1}),
      Not(HasSubstr("instrumentation: what it costs")));
}

TEST(ResultsTest, HooksAreRowsOfTheirOwnOverOneBoundAndOneBaseline) {
  const std::vector<RunRecord> records = {
      Record(1, true, 3000),
      Record(1, true, 2400, 0, "gloo", "dtrain", "fp16"),
      Record(2, true, 4800),
      Record(2, true, 5400, 0, "gloo", "dtrain", "fp16"),
      Record(2, false, 6000),
      Record(1, true, 2500, 0, "gloo", "pytorch"),
      Record(1, true, 2000, 0, "gloo", "pytorch", "fp16"),
  };
  const std::vector<ResultRow> rows = Summarize(records);
  ASSERT_EQ(rows.size(), 6u);
  EXPECT_EQ(rows[0].comm_hook, "allreduce");
  EXPECT_EQ(rows[1].comm_hook, "fp16");
  // One baseline for all hooks: the fastest allreduce one-process run.
  const std::vector<SpeedupBaseline> baselines = SpeedupBaselines(rows);
  ASSERT_EQ(baselines.size(), 1u);
  EXPECT_EQ(baselines[0].comm_hook, "allreduce");
  EXPECT_EQ(baselines[0].implementation, "dtrain");
  EXPECT_DOUBLE_EQ(*rows[1].speedup, 0.8);  // fp16 alone: 2400 / 3000
  EXPECT_DOUBLE_EQ(*rows[2].speedup, 1.6);
  EXPECT_DOUBLE_EQ(*rows[3].speedup, 1.8);
  EXPECT_DOUBLE_EQ(*rows[3].efficiency, 0.9);
  EXPECT_DOUBLE_EQ(*rows[5].speedup, 2000.0 / 3000);
  // The bound run is both hooks' bound at 2 processes.
  EXPECT_DOUBLE_EQ(*rows[2].communication_efficiency, 0.8);
  EXPECT_DOUBLE_EQ(*rows[3].communication_efficiency, 0.9);
  EXPECT_DOUBLE_EQ(*rows[3].communication_seconds_per_step,
                   60000.0 / 5400 / 500 - 0.02);
  // At 1 process the allreduce row is its own bound and fp16's.
  EXPECT_DOUBLE_EQ(*rows[0].communication_efficiency, 1.0);
  EXPECT_DOUBLE_EQ(*rows[0].communication_seconds_per_step, 0);
  EXPECT_DOUBLE_EQ(*rows[1].communication_efficiency, 0.8);
  EXPECT_DOUBLE_EQ(*rows[1].communication_seconds_per_step, 0.05 - 0.04);
  EXPECT_DOUBLE_EQ(*rows[5].bound_samples_per_second, 2500);  // PyTorch's own

  const std::string table = FormatTable(rows, Machine{2, "", 1});
  EXPECT_THAT(table, HasSubstr("with the allreduce hook, every hook's rows "
                               "alike"));
  EXPECT_THAT(table, HasSubstr("convnet allreduce 3000 samples/s (dtrain, 1 "
                               "run)"));
  EXPECT_THAT(table,
              HasSubstr("\ndtrain   gloo     convnet  fp16           2  "));
  EXPECT_THAT(ToCsv(rows), HasSubstr("\ndtrain,gloo,convnet,fp16,2,64,"));
  const nlohmann::json json =
      nlohmann::json::parse(ToJson(rows, records, {}, Machine{2, "", 1}));
  EXPECT_EQ(json["results"][3]["comm_hook"], "fp16");
  EXPECT_EQ(json["speedup_baselines"][0]["comm_hook"], "allreduce");
  EXPECT_EQ(json["runs"][1]["comm_hook"], "fp16");
  EXPECT_EQ(json["runs"][4]["comm_hook"], "allreduce");  // the bound

  // Without the default hook, each hook divides by its own one-process runs.
  const std::vector<ResultRow> own = Summarize({
      Record(1, true, 2400, 0, "gloo", "dtrain", "fp16"),
      Record(2, true, 4200, 0, "gloo", "dtrain", "fp16"),
      Record(1, true, 2000, 0, "gloo", "dtrain", "local_sgd"),
      Record(2, true, 3000, 0, "gloo", "dtrain", "local_sgd"),
  });
  ASSERT_EQ(SpeedupBaselines(own).size(), 2u);
  EXPECT_DOUBLE_EQ(*own[1].speedup, 1.75);
  EXPECT_DOUBLE_EQ(*own[3].speedup, 1.5);
  EXPECT_THAT(FormatTable(own, Machine{2, "", 1}),
              HasSubstr("convnet fp16 2400 samples/s (dtrain, 1 run); "
                        "convnet local_sgd 2000 samples/s"));
}

// The knobs and --train_flags every training had: in the table's header, the
// CSV and the JSON.
TEST(ResultsTest, TrainFlagsAreRecorded) {
  std::vector<RunRecord> records = {Record(1, true, 3000),
                                    Record(2, true, 4800)};
  for (RunRecord& r : records)
    r.config.train_flags = {"--powersgd_rank=2", "--static_graph=true"};
  const std::vector<ResultRow> rows = Summarize(records);
  EXPECT_THAT(FormatTable(rows, Machine{2, "", 1}),
              HasSubstr("\nevery training, ours and PyTorch's, with: "
                        "--powersgd_rank=2 --static_graph=true\n"));
  EXPECT_THAT(ToCsv(rows),
              HasSubstr(",--powersgd_rank=2 --static_graph=true,default\n"));
  const nlohmann::json json =
      nlohmann::json::parse(ToJson(rows, records, {}, Machine{2, "", 1}));
  EXPECT_EQ(json["train_flags"][0], "--powersgd_rank=2");
  EXPECT_EQ(json["results"][1]["train_flags"][1], "--static_graph=true");
  EXPECT_THAT(
      FormatTable(Summarize({Record(1, true, 3000)}), Machine{2, "", 1}),
      Not(HasSubstr("every training")));
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

// The exact layout: text left-aligned, numbers right-aligned, two spaces
// apart, a rule as wide as the header under it.
TEST(ResultsTest, TableColumnsAreAligned) {
  RunRecord bad = Record(4, true, 0);
  bad.ok = false;
  const std::string table =
      FormatTable(Summarize({Record(1, true, 3000), Record(2, true, 4800),
                             Record(2, false, 5000),
                             Record(4, true, 5400, 0, "gloo+shm"), bad}),
                  Machine{2, "", 1});
  const std::string header =
      "impl    backend   model    hook       procs  batch/proc  epoch s  "
      "spread  samples/s  speedup  efficiency  vs no-comm  comm ms/step  "
      "exposed comm  wall s";
  EXPECT_THAT(
      table,
      HasSubstr(absl::StrCat(
          "\n\n", header, "\n", std::string(header.size(), '-'), "\n",
          "dtrain  gloo      convnet  allreduce      1         128    20.00  "
          " 1 run       3000    1.00x        100%        100%           0.0  "
          "          0%    21.0\n"
          "dtrain  gloo      convnet  allreduce      2          64    12.50  "
          " 1 run       4800    1.60x         80%         96%           1.0  "
          "         12%    13.5\n"
          "dtrain  gloo+shm  convnet  allreduce     4*          32    11.11  "
          " 1 run       5400    1.80x         45%           -             -  "
          "         14%    12.1\n"
          "dtrain  gloo      convnet  allreduce     4*          32   FAILED",
          std::string(header.size() - 64, ' '), "\n\n")));
}

// sim_cluster's combined CSV as Python's csv module writes it (\r\n), its
// columns found by name: the table as sim_cluster printed it before the
// runner did, an empty measured rate or value as "-".
TEST(ResultsTest, ClusterTableFromTheCombinedCsv) {
  const std::string csv =
      "link_rate,measured_link_gbit,hosts,ranks_per_host,implementation,"
      "backend,model,world_size,batch_size,failed,samples_per_second,"
      "no_comm_samples_per_second,communication_efficiency,exposed_share,"
      "step_seconds_p50\r\n"
      "1gbit,0.953,2,1,dtrain,gloo,convnet,2,64,0,2052.5,905.748,2.26571,"
      "0.00247676,0.0475364\r\n"
      "1gbit,0.953,2,2,dtrain,gloo+shm,resnet18,4,32,1,0,,,0,0\r\n"
      "25gbit,,2,1,pytorch,gloo,convnet,2,64,0,12345.5,,,0.995,1.23456789\r\n";
  absl::StatusOr<std::string> table =
      ClusterTableText(csv, "out/combined.csv", Machine{2, "", 2, true});
  ASSERT_TRUE(table.ok()) << table.status();
  const std::string header =
      "link    measured  impl     backend   model     hosts  ranks/host  "
      "batch/proc  samples/s  no-comm samples/s  vs no-comm  exposed comm  "
      "step s p50  failed";
  EXPECT_EQ(
      *table,
      absl::StrCat(
          header, "\n", std::string(header.size(), '-'), "\n",
          "1gbit   0.953     dtrain   gloo      convnet       2           1  "
          "        64       2052                906        227%            0%"
          "      0.0475       0\n"
          "1gbit   0.953     dtrain   gloo+shm  resnet18      2           2  "
          "        32          0                  -           -            0%"
          "      0.0000       1\n"
          "25gbit  -         pytorch  gloo      convnet       2           1  "
          "        64      12346                  -           -          100%"
          "      1.2346       0\n"
          "\n"
          "combined: out/combined.csv (measured: Gbit/s of one TCP stream "
          "through the shaped link)\n"
          "every host shares this machine's 2 cores: runs of more ranks in "
          "total than that take turns on the cores\n"));

  // Runs within the cores: no note. \n line ends do as well.
  table = ClusterTableText(absl::StrReplaceAll(csv, {{"\r", ""}}), "c.csv",
                           Machine{4, "", 2, true});
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_THAT(*table,
              HasSubstr("\nevery host shares this machine's 4 cores\n"));
}

// A sweep with hooks: its combined CSV has comm_hook and
// communication_seconds_per_step, and the table shows both.
TEST(ResultsTest, ClusterTableShowsHooksAndCommunicationPerStep) {
  const std::string csv =
      "link_rate,measured_link_gbit,hosts,ranks_per_host,implementation,"
      "backend,model,comm_hook,world_size,batch_size,failed,"
      "samples_per_second,no_comm_samples_per_second,communication_efficiency,"
      "exposed_share,step_seconds_p50,communication_seconds_per_step\n"
      "1gbit,0.95,2,1,dtrain,gloo,convnet,allreduce,2,64,0,2000,2500,0.8,"
      "0.1,0.03,0.0064\n"
      "1gbit,0.95,2,1,dtrain,gloo,convnet,fp16,2,64,0,2200,2500,0.88,0.05,"
      "0.028,\n";
  absl::StatusOr<std::string> table =
      ClusterTableText(csv, "c.csv", Machine{2, "", 2, true});
  ASSERT_TRUE(table.ok()) << table.status();
  const std::string header =
      "link   measured  impl    backend  model    hook       hosts  "
      "ranks/host  batch/proc  samples/s  no-comm samples/s  vs no-comm  "
      "comm ms/step  exposed comm  step s p50  failed";
  EXPECT_THAT(
      *table,
      HasSubstr(absl::StrCat(
          header, "\n", std::string(header.size(), '-'), "\n",
          "1gbit  0.95      dtrain  gloo     convnet  allreduce      2  "
          "         1          64       2000               2500         80%  "
          "         6.4           10%      0.0300       0\n"
          "1gbit  0.95      dtrain  gloo     convnet  fp16           2  "
          "         1          64       2200               2500         88%  "
          "           -            5%      0.0280       0\n")));
}

// A sweep over ZeRO stages: the hook column names the stage, as the sweep's
// own table does.
TEST(ResultsTest, ClusterTableNamesTheZeroStage) {
  const std::string csv =
      "link_rate,measured_link_gbit,hosts,ranks_per_host,implementation,"
      "backend,model,comm_hook,world_size,batch_size,failed,"
      "samples_per_second,no_comm_samples_per_second,communication_efficiency,"
      "exposed_share,step_seconds_p50,zero\n"
      "1gbit,0.95,2,2,dtrain,gloo+shm,resnet18,allreduce,4,16,0,55,64,0.85,"
      "0.11,1.15,0\n"
      "1gbit,0.95,2,2,dtrain,gloo+shm,resnet18,allreduce,4,16,0,47,64,0.72,"
      "0.07,1.36,2\n";
  absl::StatusOr<std::string> table =
      ClusterTableText(csv, "c.csv", Machine{2, "", 2, true});
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_THAT(*table, HasSubstr("resnet18  allreduce            2"));
  EXPECT_THAT(*table, HasSubstr("resnet18  allreduce zero2      2"));
}

TEST(ResultsTest, ClusterTableErrorsNameTheFileAndWhat) {
  const Machine machine{2, "", 2, true};
  const std::string header =
      "link_rate,measured_link_gbit,hosts,ranks_per_host,implementation,"
      "backend,model,world_size,batch_size,failed,samples_per_second,"
      "no_comm_samples_per_second,communication_efficiency,exposed_share,"
      "step_seconds_p50\n";
  const std::string row =
      "1gbit,0.9,2,1,dtrain,gloo,convnet,2,64,0,2052,,,0,0\n";
  ASSERT_TRUE(ClusterTableText(header + row, "c.csv", machine).ok());
  for (const auto& [csv, message] :
       std::vector<std::pair<std::string, std::string>>{
           {"", "c.csv: no results"},
           {header, "c.csv: no results"},
           {absl::StrReplaceAll(header + row, {{"step_seconds_p50", "p50"}}),
            "c.csv: no column step_seconds_p50"},
           {header + absl::StrReplaceAll(row, {{"2052", "fast"}}),
            "c.csv: line 2: samples_per_second 'fast' is not a number"},
           {header + absl::StrReplaceAll(row, {{"convnet,2", "convnet,two"}}),
            "c.csv: line 2: world_size 'two' is not a number"},
           {header + "1gbit,0.9\n",
            "c.csv: line 2 has 2 fields, the header 15"},
           {header + absl::StrReplaceAll(row, {{"dtrain", "\"dtrain\""}}),
            "c.csv: line 2: quoted fields are not supported"},
       }) {
    absl::StatusOr<std::string> table = ClusterTableText(csv, "c.csv", machine);
    ASSERT_FALSE(table.ok()) << csv;
    EXPECT_EQ(table.status().message(), message);
  }
  absl::StatusOr<std::string> missing =
      ReadClusterTable("/no/such/combined.csv", machine);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("/no/such/combined.csv"));
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
