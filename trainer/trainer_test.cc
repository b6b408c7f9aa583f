// The training run with ranks as threads (Gloo over an in-memory store) on a
// small synthetic dataset: it learns, ranks stay identical, validation counts
// every test example once, checkpoints resume exactly, and bad input fails
// with a message. Real processes are exercised by train_test.sh.

#include "trainer/trainer.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <torch/cuda.h>
#include <torch/nn/module.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/atomic_file.h"
#include "base/posix_io.h"
#include "dist/backend/backend_testing.h"
#include "dist/backend/gloo/gloo_backend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/registry.h"
#include "models/state_dict/state_dict.h"
#include "nlohmann/json.hpp"
#include "trainer/trainer_testing.h"

namespace dtrain::trainer {
namespace {

using ::testing::HasSubstr;

using testing::ExpectSameParameters;
using testing::Gloo;
using testing::Parameters;
using testing::SmallRun;
using testing::TempDir;
using testing::TrainOnRanks;

TEST(TrainerTest, OneRankLearnsAndReportsEveryEpoch) {
  std::ostringstream log;
  TrainOptions o = SmallRun();
  o.report.metrics_json = TempDir("one_rank") + "/metrics.json";
  auto results = TrainOnRanks(o, 1, &log);
  ASSERT_TRUE(results[0].ok()) << results[0].status();
  const RunMetrics& m = results[0]->metrics;
  ASSERT_EQ(m.epochs.size(), 2u);
  EXPECT_EQ(m.global_step, 2 * 384 / 16);
  EXPECT_EQ(m.epochs[0].samples, 384);
  EXPECT_EQ(m.epochs[0].steps, 24);
  EXPECT_LT(m.epochs[1].train_loss, m.epochs[0].train_loss);
  // Ten learnable classes: far above the 10% of chance.
  EXPECT_GT(*m.epochs[1].val_top1, 50.0);
  EXPECT_GE(*m.epochs[1].val_top5, *m.epochs[1].val_top1);
  EXPECT_EQ(m.best_top1,
            std::max(*m.epochs[0].val_top1, *m.epochs[1].val_top1));
  EXPECT_THAT(log.str(), HasSubstr("validation"));

  absl::StatusOr<std::string> text =
      base::ReadFile(o.report.metrics_json, base::kTextFileLimit);
  ASSERT_TRUE(text.ok()) << text.status();
  const nlohmann::json json = nlohmann::json::parse(*text);
  EXPECT_EQ(json["format"], "dtrain.metrics.v1");
  EXPECT_EQ(json["config"]["world_size"], 1);
  EXPECT_EQ(json["config"]["model"], "convnet");
  // The test's World comes from no launcher.
  EXPECT_EQ(json["launch_source"], "single process");
  ASSERT_EQ(json["epochs"].size(), 2u);
  EXPECT_DOUBLE_EQ(json["epochs"][1]["train_loss"].get<double>(),
                   m.epochs[1].train_loss);
  EXPECT_GT(json["epochs"][0]["samples_per_second"].get<double>(), 0);
  const nlohmann::json& histogram = json["epochs"][0]["step_seconds_histogram"];
  EXPECT_EQ(histogram["counts"].size(), histogram["bounds"].size() + 1);
  int64_t steps = 0;
  for (const auto& c : histogram["counts"]) steps += c.get<int64_t>();
  EXPECT_EQ(steps, 24);
  EXPECT_NEAR(histogram["sum"].get<double>(),
              m.epochs[0].step_seconds_mean * 24, 1e-9);
}

TEST(TrainerTest, TwoRanksEndIdenticalAndCountEveryTestExampleOnce) {
  TrainOptions o = SmallRun();
  o.optim.epochs = 1;
  auto results = TrainOnRanks(o, 2);
  ASSERT_TRUE(results[0].ok()) << results[0].status();
  ASSERT_TRUE(results[1].ok()) << results[1].status();
  ExpectSameParameters(*results[0], *results[1]);
  const EpochMetrics& e0 = results[0]->metrics.epochs[0];
  const EpochMetrics& e1 = results[1]->metrics.epochs[0];
  // Each rank trains on half: 12 steps of 16, 384 examples in all.
  EXPECT_EQ(e0.steps, 12);
  EXPECT_EQ(e0.samples, 384);
  // Exact over ranks: both see the same totals, and top-1 is a multiple of
  // 1/101 (every one of the 101 test examples counted once).
  EXPECT_EQ(*e0.val_top1, *e1.val_top1);
  const double correct = *e0.val_top1 * 101 / 100;
  EXPECT_NEAR(correct, std::round(correct), 1e-9);
  EXPECT_EQ(results[0]->metrics.world_size, 2);
  EXPECT_EQ(results[0]->metrics.ranks_identical, absl::optional<bool>(true));
}

// Connects to 127.0.0.1:port: whether something listens there.
bool Listening(int port) {
  base::UniqueFd fd(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return ::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
}

TEST(TrainerTest, JsonLinesForLoggedStepsAndLiveMetricsOnEveryRank) {
  TrainOptions o = SmallRun();
  const std::string dir = TempDir("live");
  o.report.log_jsonl = dir + "/steps.{rank}.jsonl";
  o.report.print_freq = 5;
  o.report.metrics_port = 0;
  o.report.metrics_ranks = "all";
  o.report.metrics_bind = "127.0.0.1";
  o.report.metrics_json = dir + "/metrics.json";
  auto results = TrainOnRanks(o, 2);
  ASSERT_TRUE(results[0].ok()) << results[0].status();
  ASSERT_TRUE(results[1].ok()) << results[1].status();
  const RunMetrics& m = results[0]->metrics;
  ASSERT_EQ(m.epochs.size(), 2u);
  // 384 examples in batches of 16 over 2 ranks: 12 steps per epoch, logged at
  // batches 0, 5 and 10, then the epoch's line.
  for (int rank = 0; rank < 2; ++rank) {
    std::ifstream in(absl::StrCat(dir, "/steps.", rank, ".jsonl"));
    std::vector<nlohmann::json> lines;
    for (std::string line; std::getline(in, line);)
      lines.push_back(nlohmann::json::parse(line));
    ASSERT_EQ(lines.size(), 8u) << "rank " << rank;
    for (size_t i = 0; i < lines.size(); ++i) {
      const nlohmann::json& l = lines[i];
      const int64_t epoch = static_cast<int64_t>(i / 4);
      EXPECT_EQ(l["rank"], rank);
      EXPECT_EQ(l["epoch"], epoch);
      EXPECT_DOUBLE_EQ(l["lr"].get<double>(), *o.optim.lr);
      if (i % 4 == 3) {
        EXPECT_EQ(l["event"], "epoch");
        EXPECT_EQ(l["step"], 12 * (epoch + 1));
        EXPECT_NEAR(l["loss"].get<double>(), m.epochs[epoch].train_loss, 1e-6);
        continue;
      }
      const int64_t batch = 5 * static_cast<int64_t>(i % 4);
      EXPECT_EQ(l["event"], "step");
      EXPECT_EQ(l["batch"], batch);
      EXPECT_EQ(l["step"], 12 * epoch + batch + 1);
      EXPECT_GT(l["loss"].get<double>(), 0);
      EXPECT_GT(l["samples_per_second"].get<double>(), 0);
      EXPECT_GT(l["step_seconds"].get<double>(), 0);
      EXPECT_GE(l["exposed_communication_seconds"].get<double>(), 0);
    }
  }
  // Rank 0 served, the metrics JSON says where, and serving ended with Train.
  ASSERT_THAT(m.metrics_url, HasSubstr("http://127.0.0.1:"));
  const std::string json_text =
      base::ReadFile(o.report.metrics_json, base::kTextFileLimit).value_or("");
  const nlohmann::json json = nlohmann::json::parse(json_text);
  EXPECT_EQ(json["metrics_url"], m.metrics_url);
  EXPECT_EQ(json["config"]["metrics_port"], 0);
  EXPECT_EQ(json["config"]["metrics_ranks"], "all");
  EXPECT_EQ(json["config"]["log_jsonl"], o.report.log_jsonl);
  const int port =
      std::stoi(m.metrics_url.substr(m.metrics_url.rfind(':') + 1));
  EXPECT_FALSE(Listening(port)) << m.metrics_url << " still served";
}

TEST(TrainerTest, WithoutGradientSyncRanksDrift) {
  TrainOptions o = SmallRun();
  o.optim.epochs = 1;
  o.optim.max_steps = 3;
  o.skip_validation = true;
  o.parallel.sync_gradients = false;
  auto results = TrainOnRanks(o, 2);
  ASSERT_TRUE(results[0].ok()) << results[0].status();
  ASSERT_TRUE(results[1].ok()) << results[1].status();
  const std::vector<torch::Tensor> a = Parameters(*results[0]);
  const std::vector<torch::Tensor> b = Parameters(*results[1]);
  bool differ = false;
  for (size_t i = 0; i < a.size(); ++i) differ |= !a[i].equal(b[i]);
  EXPECT_TRUE(differ) << "shards trained without communication ended equal";
  EXPECT_EQ(results[0]->metrics.epochs[0].exposed_communication_seconds, 0);
  EXPECT_FALSE(results[0]->metrics.ranks_identical.has_value());
}

TEST(TrainerTest, ResumedRunEndsExactlyAsUninterruptedOne) {
  TrainOptions o = SmallRun();
  o.optim.epochs = 2;
  o.skip_validation = true;
  auto full = TrainOnRanks(o, 1);
  ASSERT_TRUE(full[0].ok()) << full[0].status();

  // Stop in the middle of the first epoch, then resume to the end.
  TrainOptions part = o;
  part.checkpoint.checkpoint_dir = TempDir("resume");
  part.optim.max_steps = 10;
  auto first = TrainOnRanks(part, 1);
  ASSERT_TRUE(first[0].ok()) << first[0].status();
  EXPECT_EQ(first[0]->metrics.global_step, 10);

  TrainOptions rest = o;
  rest.checkpoint.checkpoint_dir = part.checkpoint.checkpoint_dir;
  rest.checkpoint.resume = true;
  std::ostringstream log;
  auto second = TrainOnRanks(rest, 1, &log);
  ASSERT_TRUE(second[0].ok()) << second[0].status();
  EXPECT_THAT(log.str(), HasSubstr("resumed from"));
  EXPECT_EQ(second[0]->metrics.global_step, full[0]->metrics.global_step);
  EXPECT_EQ(second[0]->metrics.epochs[0].steps, 24 - 10);
  ExpectSameParameters(*second[0], *full[0]);
}

// --even_batches=false on 3 ranks: 385 examples are 129, 128 and 128 per
// rank, 9, 8 and 8 batches of 16. Ranks 1 and 2 shadow rank 0's last step of
// each epoch (taking its optimizer step too), every example counts once, the
// ranks end identical with as many steps. (An exact resume needs processes:
// threads share LibTorch's dropout generator; uneven_inputs_test.sh.)
TEST(TrainerTest, UnevenBatchesShadowTheLastStepAndCountEveryExampleOnce) {
  TrainOptions o = SmallRun();
  o.data.synthetic_train_size = 385;
  o.data.even_batches = false;
  o.skip_validation = true;
  auto results = TrainOnRanks(o, 3);
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(results[r].ok()) << results[r].status();
    EXPECT_EQ(results[r]->metrics.global_step, 2 * 9) << "rank " << r;
    ExpectSameParameters(*results[r], *results[0]);
  }
  const RunMetrics& m = results[0]->metrics;
  ASSERT_EQ(m.epochs.size(), 2u);
  for (const EpochMetrics& e : m.epochs) {
    EXPECT_EQ(e.samples, 385);  // padded: 387
    EXPECT_EQ(e.steps, 9);
  }
  // Shadowed steps are not trained steps of the ranks that shadowed them.
  EXPECT_EQ(results[1]->metrics.epochs[0].steps, 8);
  EXPECT_EQ(m.ranks_identical, absl::optional<bool>(true));

  TrainOptions padded = o;
  padded.data.even_batches = true;
  padded.optim.epochs = 1;
  auto even = TrainOnRanks(padded, 3);
  ASSERT_TRUE(even[0].ok()) << even[0].status();
  EXPECT_EQ(even[0]->metrics.epochs[0].samples, 387);
}

// Weights out at the end (rank 0, of two ranks) and in at the start: the file
// holds the trained model, a run that starts from it starts where the first
// ended, and weights that do not fit the model stop the run naming the flag.
TEST(TrainerTest, StateDictOutAndIn) {
  TrainOptions a = SmallRun();
  a.optim.epochs = 1;
  a.skip_validation = true;
  a.checkpoint.save_state_dict = TempDir("state_dict") + "/a.safetensors";
  std::ostringstream log;
  auto trained = TrainOnRanks(a, 2, &log);
  ASSERT_TRUE(trained[0].ok()) << trained[0].status();
  EXPECT_THAT(log.str(), HasSubstr("state_dict written to "));
  torch::manual_seed(99);
  models::ModelConfig config;
  config.image_size = 12;
  config.in_channels = 1;
  std::shared_ptr<models::Model> reread =
      *models::CreateModel("convnet", config);
  ASSERT_TRUE(
      models::state_dict::LoadStateDict(a.checkpoint.save_state_dict, *reread)
          .ok());
  TrainResult from_file{trained[0]->metrics, reread};
  ExpectSameParameters(from_file, *trained[0]);

  TrainOptions b = SmallRun();
  b.optim.epochs = 1;
  b.skip_validation = true;
  b.model.init_state_dict = a.checkpoint.save_state_dict;
  auto continued = TrainOnRanks(b, 1);
  TrainOptions c = b;
  c.model.init_state_dict.clear();
  auto fresh = TrainOnRanks(c, 1);
  ASSERT_TRUE(continued[0].ok() && fresh[0].ok());
  EXPECT_LT(continued[0]->metrics.epochs[0].train_loss,
            fresh[0]->metrics.epochs[0].train_loss);

  TrainOptions d = b;
  d.data.synthetic_shape = {1, 16, 16};  // another fc1
  auto refused = TrainOnRanks(d, 1);
  ASSERT_FALSE(refused[0].ok());
  EXPECT_THAT(std::string(refused[0].status().message()),
              HasSubstr("--init_state_dict: "));
  EXPECT_THAT(std::string(refused[0].status().message()),
              HasSubstr("mismatched: fc1.weight"));
}

TEST(TrainerTest, ResumeWithoutCheckpointStartsFresh) {
  TrainOptions o = SmallRun();
  o.optim.epochs = 1;
  o.optim.max_steps = 2;
  o.skip_validation = true;
  o.checkpoint.checkpoint_dir = TempDir("fresh");
  o.checkpoint.resume = true;
  std::ostringstream log;
  auto results = TrainOnRanks(o, 2, &log);
  ASSERT_TRUE(results[0].ok()) << results[0].status();
  ASSERT_TRUE(results[1].ok()) << results[1].status();
  EXPECT_THAT(log.str(), HasSubstr("starting from the beginning"));
  EXPECT_FALSE(std::filesystem::is_empty(o.checkpoint.checkpoint_dir));
}

TEST(TrainerTest, CorruptCheckpointFallsBackToThePreviousOne) {
  TrainOptions o = SmallRun();
  o.optim.epochs = 1;
  o.skip_validation = true;
  o.checkpoint.checkpoint_dir = TempDir("corrupt");
  o.checkpoint.checkpoint_every_steps = 4;
  o.optim.max_steps = 8;
  auto first = TrainOnRanks(o, 1);
  ASSERT_TRUE(first[0].ok()) << first[0].status();
  // The newest checkpoint (step 8) loses its tail.
  std::string newest;
  for (const auto& entry :
       std::filesystem::directory_iterator(o.checkpoint.checkpoint_dir)) {
    const std::string name = entry.path().filename();
    if (name.rfind("checkpoint-", 0) == 0 && name > newest) newest = name;
  }
  ASSERT_FALSE(newest.empty());
  const std::string path = o.checkpoint.checkpoint_dir + "/" + newest;
  std::filesystem::resize_file(path, std::filesystem::file_size(path) / 2);

  TrainOptions rest = o;
  rest.checkpoint.resume = true;
  rest.optim.max_steps = 0;
  std::ostringstream log;
  auto second = TrainOnRanks(rest, 1, &log);
  ASSERT_TRUE(second[0].ok()) << second[0].status();
  EXPECT_THAT(log.str(), HasSubstr("skipping checkpoint"));
  // Resumed at step 4, not 8: four more steps to the end of the epoch.
  EXPECT_EQ(second[0]->metrics.epochs[0].steps, 24 - 4);
}

TEST(TrainerTest, StopRequestOnOneRankStopsAllAtTheSameStep) {
  TrainOptions o = SmallRun();
  o.checkpoint.checkpoint_dir = TempDir("stop");
  // The weights in PyTorch's format come with the checkpoint.
  o.checkpoint.save_state_dict = o.checkpoint.checkpoint_dir + "/weights.pt";
  o.checkpoint.state_dict_with_checkpoints = true;
  std::atomic<bool> stop_rank1{true};
  std::atomic<bool> stop_rank0{false};
  std::vector<absl::StatusOr<TrainResult>> results(
      2, absl::UnknownError("rank did not run"));
  backend::testing::RunRanks(2, Gloo, [&](backend::Backend& b) {
    rendezvous::World world;
    world.rank = b.rank();
    world.world_size = b.size();
    TrainContext context;
    std::ostringstream quiet;
    context.log = &quiet;
    // Only rank 1 got the signal; rank 0 learns it through the vote.
    context.stop_requested = b.rank() == 1 ? &stop_rank1 : &stop_rank0;
    results[b.rank()] = Train(o, world, b, context);
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(results[r].ok());
    EXPECT_EQ(results[r].status().code(), absl::StatusCode::kCancelled);
    EXPECT_THAT(results[r].status().message(), HasSubstr("at step 1;"));
  }
  EXPECT_TRUE(std::filesystem::exists(o.checkpoint.checkpoint_dir +
                                      "/checkpoint-000000001.dtc"));
  models::ModelConfig config;
  config.image_size = 12;
  config.in_channels = 1;
  std::shared_ptr<models::Model> reread =
      *models::CreateModel("convnet", config);
  const absl::Status loaded =
      models::state_dict::LoadStateDict(o.checkpoint.save_state_dict, *reread);
  EXPECT_TRUE(loaded.ok()) << loaded;
}

TEST(TrainerTest, MissingDataFailsOnEveryRankNamingThePath) {
  TrainOptions o = SmallRun();
  o.data.dataset = "mnist";
  o.data.data_dir = "/nonexistent/mnist";
  auto results = TrainOnRanks(o, 2);
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(results[r].ok());
    EXPECT_THAT(results[r].status().message(),
                HasSubstr(absl::StrCat("[rank ", r, "]")));
    EXPECT_THAT(results[r].status().message(), HasSubstr("/nonexistent/mnist"));
  }
}

TEST(TrainerTest, CudaWithoutDeviceIsAClearError) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "a CUDA device is visible";
  TrainOptions o = SmallRun();
  o.launch.device = "cuda";
  o.launch.dist_backend = "nccl";
  auto results = TrainOnRanks(o, 1, nullptr, /*cuda_device=*/0);
  ASSERT_FALSE(results[0].ok());
  EXPECT_EQ(results[0].status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(results[0].status().message(),
              HasSubstr("--device=cuda: cuda:0 is not usable from LibTorch"));
}

// The device is chosen once, by the caller (ChooseCudaDevice); Train only
// checks that the choice fits the options.
TEST(TrainerTest, DeviceMustAgreeWithTheCallersChoice) {
  TrainOptions o = SmallRun();
  o.launch.device = "cuda";
  o.launch.dist_backend = "nccl";
  auto unset = TrainOnRanks(o, 1);
  ASSERT_FALSE(unset[0].ok());
  EXPECT_EQ(unset[0].status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unset[0].status().message(),
              HasSubstr("--device=cuda: TrainContext::cuda_device is not set"));

  auto cpu_with_gpu = TrainOnRanks(SmallRun(), 1, nullptr, /*cuda_device=*/1);
  ASSERT_FALSE(cpu_with_gpu[0].ok());
  EXPECT_EQ(cpu_with_gpu[0].status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(cpu_with_gpu[0].status().message(),
              HasSubstr("--device=cpu, but TrainContext::cuda_device is 1"));
}

}  // namespace
}  // namespace dtrain::trainer
