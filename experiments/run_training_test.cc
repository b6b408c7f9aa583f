#include "experiments/run_training.h"

#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::experiments {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

// Ours (dtrain) on `backend` with `model`, `world_size` processes of
// `batch` each; tests set what else they need.
RunConfig Config(const char* backend, const char* model, int world_size,
                 int64_t batch) {
  RunConfig c;
  c.implementation = "dtrain";
  c.backend = backend;
  c.model = model;
  c.world_size = world_size;
  c.batch_size = batch;
  return c;
}

TEST(RunTrainingTest, CommandGoesThroughTheLauncher) {
  RunConfig c = Config("gloo", "resnet18", 4, 32);
  c.max_steps = 8;
  c.sync_gradients = false;
  Programs p{"/bin/launch", "/bin/train", "/usr/bin/python3", "/x/ref.py"};
  const std::vector<std::string> cmd =
      TrainingCommand(c, p, 0, "/o/m.json", 777);
  EXPECT_EQ(cmd[0], "/bin/launch");
  EXPECT_THAT(cmd, Contains("--nproc_per_node=4"));
  EXPECT_THAT(cmd, Contains("--master_port=777"));
  EXPECT_THAT(cmd, Contains("/bin/train"));
  EXPECT_THAT(cmd, Contains("--sync_gradients=false"));
  EXPECT_THAT(cmd, Contains("--metrics_json=/o/m.json"));
  EXPECT_THAT(cmd, Contains("--small_input_stem"));
  EXPECT_THAT(cmd, Contains("--max_steps=8"));
  // The sweep's gloo is Gloo over TCP; gloo+shm is train's default.
  EXPECT_THAT(cmd, Contains("--dist_backend=gloo"));
  EXPECT_THAT(cmd, Contains("--shm=false"));
  c.backend = "gloo+shm";
  const std::vector<std::string> shm = TrainingCommand(c, p, 0, "", 1);
  EXPECT_THAT(shm, Contains("--dist_backend=gloo"));
  EXPECT_THAT(shm, Not(Contains("--shm=false")));
  c.backend = "gloo";
  c.implementation = "pytorch";
  const std::string py =
      absl::StrJoin(TrainingCommand(c, p, 0, "/o/m.json", 1), " ");
  EXPECT_THAT(py, HasSubstr("-- /usr/bin/python3 /x/ref.py --model=resnet18"));
  EXPECT_THAT(py, Not(HasSubstr("--nnodes")));
  EXPECT_THAT(py, Not(HasSubstr("--shm")));
}

// Both trainers take the hook and the knobs under the same flags: a hook but
// the default as --comm_hook, the train flags after the sweep's own.
TEST(RunTrainingTest, HooksAndTrainFlagsGoToBothTrainers) {
  RunConfig c = Config("gloo", "convnet", 2, 64);
  c.comm_hook = "powersgd";
  c.train_flags = {"--powersgd_rank=2", "--static_graph=true"};
  Programs p{"/bin/launch", "/bin/train", "/usr/bin/python3", "/x/ref.py"};
  for (const char* impl : {"dtrain", "pytorch"}) {
    c.implementation = impl;
    const std::string cmd =
        absl::StrJoin(TrainingCommand(c, p, 0, "/o/m.json", 1), " ");
    EXPECT_THAT(cmd, HasSubstr(" --comm_hook=powersgd --powersgd_rank=2 "
                               "--static_graph=true"))
        << impl;
    EXPECT_TRUE(absl::EndsWith(cmd, "--static_graph=true")) << cmd;
  }
  // The default hook is train's default: not spelled out.
  c.comm_hook = kDefaultCommHook;
  c.train_flags.clear();
  EXPECT_THAT(absl::StrJoin(TrainingCommand(c, p, 0, "", 1), " "),
              Not(HasSubstr("--comm_hook")));
  // A ZeRO stage is --zero, to both; none is not spelled out.
  EXPECT_THAT(absl::StrJoin(TrainingCommand(c, p, 0, "", 1), " "),
              Not(HasSubstr("--zero")));
  c.zero = 1;
  for (const char* impl : {"dtrain", "pytorch"}) {
    c.implementation = impl;
    EXPECT_THAT(absl::StrJoin(TrainingCommand(c, p, 0, "", 1), " "),
                HasSubstr(" --zero=1"))
        << impl;
  }
}

TEST(RunTrainingTest, OverNodesEachNodeStartsItsShare) {
  RunConfig c = Config("nccl", "resnet18", 4, 32);
  c.nnodes = 2;
  c.master_addr = "10.0.0.1";
  Programs p{"/bin/launch", "/bin/train", "/usr/bin/python3", "/x/ref.py"};
  const std::vector<std::string> cmd = TrainingCommand(c, p, 1, "", 29503);
  EXPECT_THAT(cmd, Contains("--nproc_per_node=2"));
  EXPECT_THAT(cmd, Contains("--nnodes=2"));
  EXPECT_THAT(cmd, Contains("--node_rank=1"));
  EXPECT_THAT(cmd, Contains("--master_addr=10.0.0.1"));
  EXPECT_THAT(cmd, Contains("--master_port=29503"));
  EXPECT_THAT(cmd, Contains("--device=cuda"));
  // Rank 0 writes the metrics, on node 0: the other nodes ask for none.
  EXPECT_THAT(absl::StrJoin(cmd, " "), Not(HasSubstr("--metrics_json")));
}

TEST(RunTrainingTest, ParsesThePythonTorchProbe) {
  absl::StatusOr<PythonTorch> t = ParsePythonTorchProbe(
      R"({"torch": "1.13.1", "cuda": null, "cuda_devices": 0, "nccl": false})");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->version, "1.13.1");
  EXPECT_FALSE(t->cuda);
  EXPECT_EQ(t->cuda_devices, 0);
  EXPECT_FALSE(t->nccl);
  t = ParsePythonTorchProbe(
      R"({"torch": "2.6.0", "cuda": "12.4", "cuda_devices": 2, "nccl": true})");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->cuda);
  EXPECT_EQ(t->cuda_devices, 2);
  EXPECT_TRUE(t->nccl);
  EXPECT_EQ(ParsePythonTorchProbe("Traceback (most recent call last):")
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(ParsePythonTorchProbe(R"({"torch": "1.13.1"})").ok());
  // Whether its Gloo sums bfloat16 and float16: true where an older script
  // does not say.
  EXPECT_TRUE(t->gloo_bfloat16);
  EXPECT_TRUE(t->gloo_float16);
  t = ParsePythonTorchProbe(
      R"({"torch": "1.13.1", "cuda": null, "cuda_devices": 0, "nccl": false,)"
      R"( "gloo_bfloat16": false})");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE(t->gloo_bfloat16);
  EXPECT_TRUE(t->gloo_float16);
  t = ParsePythonTorchProbe(
      R"({"torch": "2.14.1", "cuda": null, "cuda_devices": 0, "nccl": false,)"
      R"( "gloo_float16": false, "gloo_bfloat16": false})");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE(t->gloo_float16);
  EXPECT_FALSE(t->gloo_bfloat16);
}

TEST(RunTrainingTest, AProbeThatCannotRunSaysWhat) {
  const std::string fake = ::testing::TempDir() + "/no_torch.sh";
  {
    std::ofstream out(fake);
    out << "#!/bin/sh\necho \"No module named 'torch'\" >&2\nexit 1\n";
  }
  Programs p{"/bin/launch", "/bin/train", "/bin/sh", fake};
  absl::StatusOr<PythonTorch> t = ProbePythonTorch(p);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(t.status().message(), HasSubstr("python3-torch"));
  EXPECT_THAT(t.status().message(), HasSubstr("No module named 'torch'"));
}

TEST(RunTrainingTest, ReadsMetricsAndRejectsGarbage) {
  const std::string path = ::testing::TempDir() + "/m.json";
  {
    std::ofstream out(path);
    out << R"({"format": "dtrain.metrics.v1", "startup_seconds": 0.5,
      "epochs": [{"epoch_seconds": 10, "samples": 6000, "steps": 47,
                  "exposed_communication_seconds": 1, "data_seconds": 0.2,
                  "step_seconds_p50": 0.2, "step_seconds_p90": 0.3,
                  "step_seconds_histogram": {"bounds": [1], "counts": [40, 7],
                                             "sum": 9.5}}]})";
  }
  RunRecord r;
  ASSERT_TRUE(ReadMetrics(path, &r).ok());
  EXPECT_EQ(r.samples, 6000);
  EXPECT_EQ(r.steps, 47);
  EXPECT_DOUBLE_EQ(r.samples_per_second, 600);
  EXPECT_DOUBLE_EQ(r.startup_seconds, 0.5);
  EXPECT_EQ(r.step_histogram, (std::vector<int64_t>{40, 7}));
  EXPECT_EQ(r.optimizer_state_bytes, 0);  // not in this file
  {
    std::ofstream out(path);
    out << R"({"format": "dtrain.metrics.v1", "startup_seconds": 0.5,
      "optimizer_state_bytes": [300, 200], "peak_rss_bytes": [4000, 5000],
      "epochs": [{"epoch_seconds": 10, "samples": 6000, "steps": 47,
                  "exposed_communication_seconds": 1, "data_seconds": 0.2,
                  "step_seconds_p50": 0.2, "step_seconds_p90": 0.3}]})";
  }
  ASSERT_TRUE(ReadMetrics(path, &r).ok());
  EXPECT_EQ(r.optimizer_state_bytes, 300);  // the largest rank's
  EXPECT_EQ(r.peak_rss_bytes, 5000);
  {
    std::ofstream out(path);
    out << "{\"format\": \"dtrain.metrics.v1\", \"epochs\": [";  // truncated
  }
  EXPECT_FALSE(ReadMetrics(path, &r).ok());
  EXPECT_EQ(ReadMetrics("/nonexistent.json", &r).code(),
            absl::StatusCode::kNotFound);
}

TEST(RunTrainingTest, AFailingProgramGivesARecordWithItsOutput) {
  const RunConfig c = Config("gloo", "convnet", 1, 8);
  // The "launcher" is a shell that prints and fails.
  const std::string fake = ::testing::TempDir() + "/fake_launch.sh";
  {
    std::ofstream out(fake);
    out << "#!/bin/sh\necho 'rank 1 exploded' >&2\nexit 3\n";
  }
  ASSERT_EQ(std::system(("chmod +x " + fake).c_str()), 0);
  Programs p{fake, "/bin/true", "", ""};
  absl::StatusOr<RunRecord> r = RunTraining(
      c, p, 0, ::testing::TempDir() + "/runs", absl::Seconds(30), nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->ok);
  EXPECT_THAT(r->error, HasSubstr("exit 3"));
  EXPECT_THAT(r->error, HasSubstr("rank 1 exploded"));
}

TEST(RunTrainingTest, OnlyNodeZeroMeasures) {
  RunConfig c = Config("gloo", "convnet", 2, 8);
  c.nnodes = 2;
  c.master_addr = "127.0.0.1";
  c.master_port = 29999;
  // A "launcher" that succeeds without training: node 1 only needs its
  // ranks to end well; node 0 needs rank 0's metrics.
  Programs p{"/bin/true", "/bin/true", "", ""};
  const std::string dir = ::testing::TempDir() + "/nodes";
  absl::StatusOr<RunRecord> r =
      RunTraining(c, p, 1, dir, absl::Seconds(30), nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->ok) << r->error;
  EXPECT_TRUE(r->metrics_path.empty());
  EXPECT_EQ(r->steps, 0);
  r = RunTraining(c, p, 0, dir, absl::Seconds(30), nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->ok);
  EXPECT_THAT(r->error, HasSubstr("no metrics file"));
}

TEST(RunTrainingTest, ATracedRunWritesItsTraceUnderTraces) {
  RunConfig c = Config("gloo", "convnet", 2, 8);
  c.trace = true;
  // A "launcher" that keeps its arguments.
  const std::string dir = ::testing::TempDir() + "/traced";
  const std::string fake = ::testing::TempDir() + "/args.sh";
  {
    std::ofstream out(fake);
    out << "#!/bin/sh\necho \"$@\" > " << dir << "/args\n";
  }
  ASSERT_EQ(std::system(("chmod +x " + fake).c_str()), 0);
  Programs p{fake, "/bin/true", "", ""};
  ASSERT_TRUE(RunTraining(c, p, 0, dir, absl::Seconds(30), nullptr).ok());
  std::ifstream args(dir + "/args");
  std::string line;
  std::getline(args, line);
  EXPECT_THAT(line, HasSubstr(absl::StrCat(" --trace=", dir, "/traces/",
                                           c.Slug(), ".json")));
  struct stat st;
  EXPECT_EQ(::stat((dir + "/traces").c_str(), &st), 0);
  EXPECT_THAT(line, Not(HasSubstr("--trace_steps")));

  // The instrumentation's runs: every step traced; the recorder off.
  c.trace = false;
  c.instrumentation = "trace";
  ASSERT_TRUE(RunTraining(c, p, 0, dir, absl::Seconds(30), nullptr).ok());
  std::ifstream args2(dir + "/args");
  std::getline(args2, line);
  EXPECT_THAT(line, HasSubstr(absl::StrCat(" --trace=", dir, "/traces/",
                                           c.Slug(), ".json")));
  EXPECT_THAT(line, HasSubstr(" --trace_steps=1:1000000000"));
  c.instrumentation = "no_flight_recorder";
  ASSERT_TRUE(RunTraining(c, p, 0, dir, absl::Seconds(30), nullptr).ok());
  std::ifstream args3(dir + "/args");
  std::getline(args3, line);
  EXPECT_THAT(line, HasSubstr(" --flight_recorder=0"));
  EXPECT_THAT(line, Not(HasSubstr("--trace")));
}

TEST(RunTrainingTest, AHangingRunIsStoppedAtTheTimeout) {
  const RunConfig c = Config("gloo", "convnet", 1, 8);
  const std::string fake = ::testing::TempDir() + "/hang.sh";
  {
    std::ofstream out(fake);
    out << "#!/bin/sh\nexec sleep 60\n";
  }
  ASSERT_EQ(std::system(("chmod +x " + fake).c_str()), 0);
  Programs p{fake, "/bin/true", "", ""};
  absl::StatusOr<RunRecord> r = RunTraining(
      c, p, 0, ::testing::TempDir() + "/runs", absl::Seconds(1), nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->ok);
  EXPECT_THAT(r->error, HasSubstr("timeout"));
  EXPECT_LT(r->wall_seconds, 20);
}

}  // namespace
}  // namespace dtrain::experiments
