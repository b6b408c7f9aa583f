// The communication hook's state across --resume, with two ranks as threads:
// a local SGD run interrupted and resumed ends exactly as the uninterrupted
// one (the hook's step count goes on from the checkpoint's, so the switch
// from global averaging to local steps lands on the same step), and so does
// a PowerSGD run (each rank gets its own error feedback back); at another
// world size PowerSGD's per-rank state starts fresh, saying so; a checkpoint
// of another hook or without hook state (version 2) starts the hook afresh
// and says so, and hook state that does not fit stops the run.
#include <torch/nn/modules/linear.h>
#include <torch/types.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/crc32.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/model.h"
#include "models/registry.h"
#include "trainer/trainer.h"
#include "trainer/trainer_testing.h"

namespace dtrain::trainer {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

using testing::ExpectSameParameters;
using testing::SmallRun;
using testing::TempDir;
using testing::TrainOnRanks;

// A linear classifier whose initial weights are fixed, not drawn: runs with
// ranks as threads share LibTorch's global generator, so drawn weights could
// differ from run to run, and the runs here are compared bit for bit.
class FixedLinear : public models::Model {
 public:
  FixedLinear(int64_t in_features, int64_t num_classes) : Model("FixedLinear") {
    fc_ = register_module("fc", torch::nn::Linear(in_features, num_classes));
    torch::NoGradGuard no_grad;
    fc_->weight.copy_((torch::arange(fc_->weight.numel()).remainder(7) - 3)
                          .to(torch::kFloat)
                          .reshape(fc_->weight.sizes()) *
                      0.01);
    fc_->bias.zero_();
  }
  torch::Tensor Forward(const torch::Tensor& input,
                        models::LayerTrace*) override {
    return fc_->forward(input.flatten(1));
  }

 private:
  torch::nn::Linear fc_{nullptr};
};

const models::ModelRegistration kFixedLinear(
    {"fixed_linear",
     "a linear model with fixed initial weights",
     10,
     {1, 12, 12}},
    [](const models::ModelConfig& c)
        -> absl::StatusOr<std::shared_ptr<models::Model>> {
      return std::make_shared<FixedLinear>(
          *c.in_channels * *c.image_size * *c.image_size, *c.num_classes);
    });

// One epoch of 12 steps a rank (384 examples, 2 ranks, batch 16) of post-local
// SGD: gradients averaged for 4 steps, then parameters every 3.
TrainOptions LocalSgdRun() {
  TrainOptions o = SmallRun();
  o.model.name = "fixed_linear";
  o.optim.epochs = 1;
  o.skip_validation = true;
  o.num_sanity_val_steps = 0;
  o.parallel.comm_hook = "local_sgd";
  o.parallel.local_sgd_start_step = 4;
  o.parallel.local_sgd_period = 3;
  return *ResolveDefaults(o);
}

// The same run with PowerSGD: plain allreduce for 2 steps, then compressed
// with error feedback (the weight compressed, the bias not).
TrainOptions PowerSgdRun() {
  TrainOptions o = LocalSgdRun();
  o.parallel.comm_hook = "powersgd";
  o.parallel.powersgd_start_step = 2;
  return o;
}

// The first `steps` steps of `o` with `hook`, checkpointed in `dir`.
void TrainSteps(TrainOptions o, const std::string& hook, const std::string& dir,
                int steps = 2) {
  o.parallel.comm_hook = hook;
  o.optim.max_steps = steps;
  o.checkpoint.checkpoint_dir = dir;
  auto first = TrainOnRanks(o, 2);
  ASSERT_TRUE(first[0].ok()) << first[0].status();
  ASSERT_TRUE(first[1].ok()) << first[1].status();
  ASSERT_TRUE(std::filesystem::exists(
      absl::StrCat(dir, "/checkpoint-00000000", steps, ".dtc")));
}

// `o` resumed from `dir` to its end on `ranks` ranks, rank 0 logging to
// `log`.
std::vector<absl::StatusOr<TrainResult>> Resume(TrainOptions o,
                                                const std::string& dir,
                                                std::ostream* log,
                                                int ranks = 2) {
  o.checkpoint.checkpoint_dir = dir;
  o.checkpoint.resume = true;
  return TrainOnRanks(o, ranks, log);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

bool SameParameters(const TrainResult& a, const TrainResult& b) {
  const std::vector<at::Tensor> pa = testing::Parameters(a);
  const std::vector<at::Tensor> pb = testing::Parameters(b);
  for (size_t i = 0; i < pa.size(); ++i) {
    if (!pa[i].equal(pb[i])) return false;
  }
  return pa.size() == pb.size();
}

void PutLittleEndian(uint64_t value, int size, std::string& out) {
  for (int i = 0; i < size; ++i)
    out.push_back(static_cast<char>(value >> 8 * i));
}

// Rewrites the checkpoint at `path` (version 3, HOOK its last section) as
// docs/FORMATS.md lays it out: without its HOOK section as version 2 when
// `hook_body` is null, else with `hook_body` as the HOOK section's body.
void RewriteHook(const std::string& path, const std::string* hook_body) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes{std::istreambuf_iterator<char>(in), {}};
  in.close();
  ASSERT_GT(bytes.size(), 24u);
  const absl::string_view payload = absl::string_view(bytes).substr(24);
  size_t at = 0;
  for (int section = 0; section < 3; ++section) {  // MODL, OPTM, STAT
    uint64_t length = 0;
    std::memcpy(&length, payload.data() + at + 4, 8);
    at += 4 + 8 + length;
  }
  ASSERT_EQ(payload.substr(at, 4), "HOOK");
  std::string rewritten(payload.substr(0, at));
  if (hook_body != nullptr) {
    rewritten += "HOOK";
    PutLittleEndian(hook_body->size(), 8, rewritten);
    rewritten += *hook_body;
  }
  std::string out = "DTRAINCK";
  PutLittleEndian(hook_body != nullptr ? 3 : 2, 4, out);
  PutLittleEndian(rewritten.size(), 8, out);
  PutLittleEndian(base::Crc32(rewritten), 4, out);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << out << rewritten;
}

TEST(CommHookResumeTest, LocalSgdResumedEndsExactlyAsUninterrupted) {
  const TrainOptions o = LocalSgdRun();
  auto full = TrainOnRanks(o, 2);
  ASSERT_TRUE(full[0].ok()) << full[0].status();
  ASSERT_TRUE(full[1].ok()) << full[1].status();
  EXPECT_EQ(full[0]->metrics.global_step, 12);
  // Ending on a local step (the averager averages after steps 5, 8 and 11),
  // the ranks differ: each is compared with itself below.
  EXPECT_FALSE(SameParameters(*full[0], *full[1]));

  // Interrupted after 2 of the 4 globally averaged steps, then resumed: the
  // hook does 2 more before its local steps, as the uninterrupted run did.
  const std::string dir = TempDir("local_sgd_resume");
  TrainSteps(o, "local_sgd", dir);
  std::ostringstream log;
  auto resumed = Resume(o, dir, &log);
  ASSERT_TRUE(resumed[0].ok()) << resumed[0].status();
  ASSERT_TRUE(resumed[1].ok()) << resumed[1].status();
  EXPECT_THAT(log.str(), HasSubstr("resumed from"));
  EXPECT_THAT(log.str(), Not(HasSubstr("fresh state")));
  EXPECT_EQ(resumed[0]->metrics.global_step, 12);
  ExpectSameParameters(*resumed[0], *full[0]);
  ExpectSameParameters(*resumed[1], *full[1]);

  // The same two steps saved by the allreduce hook: local SGD starts afresh
  // (4 globally averaged steps from step 3 on), says so, and ends elsewhere.
  const std::string other = TempDir("allreduce_then_local_sgd");
  TrainSteps(o, "allreduce", other);
  std::ostringstream other_log;
  auto afresh = Resume(o, other, &other_log);
  ASSERT_TRUE(afresh[0].ok()) << afresh[0].status();
  ASSERT_TRUE(afresh[1].ok()) << afresh[1].status();
  EXPECT_THAT(
      other_log.str(),
      HasSubstr("the checkpoint was written with --comm_hook=allreduce, "
                "this run uses local_sgd: local_sgd starts from a "
                "fresh state"));
  EXPECT_FALSE(SameParameters(*afresh[0], *full[0]));
}

// Stopped after 4 steps (2 of them compressed, so each rank has its own
// error feedback), then resumed: every rank ends bit for bit as in the
// uninterrupted run.
TEST(CommHookResumeTest, PowerSgdResumedEndsExactlyOnEveryRank) {
  const TrainOptions o = PowerSgdRun();
  auto full = TrainOnRanks(o, 2);
  ASSERT_TRUE(full[0].ok()) << full[0].status();
  ASSERT_TRUE(full[1].ok()) << full[1].status();
  EXPECT_EQ(full[0]->metrics.global_step, 12);

  const std::string dir = TempDir("powersgd_resume");
  TrainSteps(o, "powersgd", dir, 4);
  // Rank 1's errors are in the file, under its rank.
  const std::string file = ReadFile(dir + "/checkpoint-000000004.dtc");
  EXPECT_THAT(file, HasSubstr("rank0/powersgd.bucket0.error"));
  EXPECT_THAT(file, HasSubstr("rank1/powersgd.bucket0.error"));
  EXPECT_THAT(file, Not(HasSubstr("rank2/")));
  std::ostringstream log;
  auto resumed = Resume(o, dir, &log);
  ASSERT_TRUE(resumed[0].ok()) << resumed[0].status();
  ASSERT_TRUE(resumed[1].ok()) << resumed[1].status();
  EXPECT_THAT(log.str(), HasSubstr("resumed from"));
  EXPECT_THAT(log.str(), Not(HasSubstr("fresh")));
  EXPECT_EQ(resumed[0]->metrics.global_step, 12);
  ExpectSameParameters(*resumed[0], *full[0]);
  ExpectSameParameters(*resumed[1], *full[1]);
}

// Two ranks' errors cannot be handed to three: one line, the shared state
// loaded, and the run trains on to its end.
TEST(CommHookResumeTest, PowerSgdAtAnotherWorldSizeStartsItsErrorsFresh) {
  const TrainOptions o = PowerSgdRun();
  const std::string dir = TempDir("powersgd_world_size");
  TrainSteps(o, "powersgd", dir, 4);
  std::ostringstream log;
  auto resumed = Resume(o, dir, &log, /*ranks=*/3);
  for (const auto& result : resumed) {
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_GT(result->metrics.global_step, 4);
  }
  EXPECT_THAT(log.str(), HasSubstr("resumed from"));
  EXPECT_THAT(
      log.str(),
      HasSubstr("the checkpoint's per-rank state of communication hook "
                "powersgd was written by 2 ranks, this run has 3: it cannot "
                "be mapped to these ranks, so powersgd's per-rank state "
                "starts fresh (its shared state is loaded)"));
  ExpectSameParameters(*resumed[1], *resumed[0]);
  ExpectSameParameters(*resumed[2], *resumed[0]);
}

// Uneven inputs (193 and 192 examples: 13 and 12 batches): inside the
// epoch's Join the ranks reach checkpoints at different points (rank 1 has no
// batch left at step 12, so writes none there), so those go without per-rank
// state, saying so, and nothing waits; the epoch's checkpoint, after the
// Join, has every rank's.
TEST(CommHookResumeTest, UnevenEpochCheckpointsGoWithoutPerRankState) {
  TrainOptions o = PowerSgdRun();
  o.data.synthetic_train_size = 385;
  o.data.even_batches = false;
  o.checkpoint.checkpoint_every_steps = 4;
  const std::string dir = TempDir("powersgd_uneven");
  o.checkpoint.checkpoint_dir = dir;
  std::ostringstream log;
  auto results = TrainOnRanks(o, 2, &log);
  ASSERT_TRUE(results[0].ok()) << results[0].status();
  ASSERT_TRUE(results[1].ok()) << results[1].status();
  EXPECT_THAT(log.str(),
              HasSubstr("the checkpoint at step 12 has no per-rank state of "
                        "powersgd (ranks step unevenly inside this epoch): a "
                        "resume from it starts that state fresh"));
  EXPECT_THAT(ReadFile(dir + "/checkpoint-000000012.dtc"),
              Not(HasSubstr("rank1/")));
  EXPECT_THAT(ReadFile(dir + "/checkpoint-000000013.dtc"),
              HasSubstr("rank1/powersgd.bucket0.error"));
}

TEST(CommHookResumeTest, AnotherHookOrNoHookStateIsSaid) {
  const TrainOptions o = LocalSgdRun();

  // Local SGD's state, resumed by the allreduce hook: one line, and the run
  // goes on.
  const std::string dir = TempDir("local_sgd_then_allreduce");
  TrainSteps(o, "local_sgd", dir);
  TrainOptions allreduce = o;
  allreduce.parallel.comm_hook = "allreduce";
  std::ostringstream log;
  auto resumed = Resume(allreduce, dir, &log);
  ASSERT_TRUE(resumed[0].ok()) << resumed[0].status();
  ASSERT_TRUE(resumed[1].ok()) << resumed[1].status();
  EXPECT_THAT(
      log.str(),
      HasSubstr("the checkpoint was written with --comm_hook=local_sgd, "
                "this run uses allreduce: the checkpoint's local_sgd "
                "state is not used"));

  // A version 2 file (no HOOK section) resumed by local SGD.
  const std::string v2 = TempDir("version2_then_local_sgd");
  TrainSteps(o, "local_sgd", v2);
  RewriteHook(v2 + "/checkpoint-000000002.dtc", nullptr);
  std::ostringstream v2_log;
  resumed = Resume(o, v2, &v2_log);
  ASSERT_TRUE(resumed[0].ok()) << resumed[0].status();
  ASSERT_TRUE(resumed[1].ok()) << resumed[1].status();
  EXPECT_THAT(v2_log.str(), HasSubstr("resumed from"));
  EXPECT_THAT(v2_log.str(),
              HasSubstr("the checkpoint holds no communication hook state (an "
                        "older format, or written without DDP): local_sgd "
                        "starts from a fresh state"));
}

TEST(CommHookResumeTest, HookStateThatDoesNotFitStopsTheRun) {
  const TrainOptions o = LocalSgdRun();
  const std::string dir = TempDir("unfit_hook_state");
  TrainSteps(o, "local_sgd", dir);
  // local_sgd.steps as a float32 scalar instead of an int64 one.
  std::string body;
  PutLittleEndian(9, 4, body);
  body += "local_sgd";
  PutLittleEndian(1, 4, body);
  PutLittleEndian(15, 4, body);
  body += "local_sgd.steps";
  body += std::string("\x01\x00", 2);  // float32, a scalar
  const float two = 2;
  body.append(reinterpret_cast<const char*>(&two), 4);
  RewriteHook(dir + "/checkpoint-000000002.dtc", &body);
  auto resumed = Resume(o, dir, nullptr);
  for (const auto& result : resumed) {
    EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition)
        << result.status();
    EXPECT_THAT(std::string(result.status().message()),
                HasSubstr("--resume: the checkpoint's state of communication "
                          "hook local_sgd does not fit this model and hook: "
                          "local SGD's state is one int64"));
  }
}

}  // namespace
}  // namespace dtrain::trainer
