#include "experiments/run_training.h"

#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::experiments {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

TEST(RunTrainingTest, CommandGoesThroughTheLauncher) {
  RunConfig c;
  c.implementation = "dtrain";
  c.backend = "gloo";
  c.model = "resnet18";
  c.world_size = 4;
  c.batch_size = 32;
  c.max_steps = 8;
  c.sync_gradients = false;
  Programs p{"/bin/launch", "/bin/train", "/usr/bin/python3", "/x/ref.py"};
  const std::vector<std::string> cmd = TrainingCommand(c, p, "/o/m.json", 777);
  EXPECT_EQ(cmd[0], "/bin/launch");
  EXPECT_THAT(cmd, Contains("--nproc_per_node=4"));
  EXPECT_THAT(cmd, Contains("--master_port=777"));
  EXPECT_THAT(cmd, Contains("/bin/train"));
  EXPECT_THAT(cmd, Contains("--sync_gradients=false"));
  EXPECT_THAT(cmd, Contains("--metrics_json=/o/m.json"));
  EXPECT_THAT(cmd, Contains("--small_input_stem"));
  EXPECT_THAT(cmd, Contains("--max_steps=8"));
  c.implementation = "pytorch";
  const std::string py =
      absl::StrJoin(TrainingCommand(c, p, "/o/m.json", 1), " ");
  EXPECT_THAT(py, HasSubstr("-- /usr/bin/python3 /x/ref.py --model=resnet18"));
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
  {
    std::ofstream out(path);
    out << "{\"format\": \"dtrain.metrics.v1\", \"epochs\": [";  // truncated
  }
  EXPECT_FALSE(ReadMetrics(path, &r).ok());
  EXPECT_EQ(ReadMetrics("/nonexistent.json", &r).code(),
            absl::StatusCode::kNotFound);
}

TEST(RunTrainingTest, AFailingProgramGivesARecordWithItsOutput) {
  RunConfig c;
  c.implementation = "dtrain";
  c.backend = "gloo";
  c.model = "convnet";
  c.batch_size = 8;
  // The "launcher" is a shell that prints and fails.
  const std::string fake = ::testing::TempDir() + "/fake_launch.sh";
  {
    std::ofstream out(fake);
    out << "#!/bin/sh\necho 'rank 1 exploded' >&2\nexit 3\n";
  }
  ASSERT_EQ(std::system(("chmod +x " + fake).c_str()), 0);
  Programs p{fake, "/bin/true", "", ""};
  absl::StatusOr<RunRecord> r = RunTraining(
      c, p, ::testing::TempDir() + "/runs", absl::Seconds(30), nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->ok);
  EXPECT_THAT(r->error, HasSubstr("exit 3"));
  EXPECT_THAT(r->error, HasSubstr("rank 1 exploded"));
}

TEST(RunTrainingTest, AHangingRunIsStoppedAtTheTimeout) {
  RunConfig c;
  c.implementation = "dtrain";
  c.backend = "gloo";
  c.model = "convnet";
  c.batch_size = 8;
  const std::string fake = ::testing::TempDir() + "/hang.sh";
  {
    std::ofstream out(fake);
    out << "#!/bin/sh\nexec sleep 60\n";
  }
  ASSERT_EQ(std::system(("chmod +x " + fake).c_str()), 0);
  Programs p{fake, "/bin/true", "", ""};
  absl::StatusOr<RunRecord> r = RunTraining(
      c, p, ::testing::TempDir() + "/runs", absl::Seconds(1), nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->ok);
  EXPECT_THAT(r->error, HasSubstr("timeout"));
  EXPECT_LT(r->wall_seconds, 20);
}

}  // namespace
}  // namespace dtrain::experiments
