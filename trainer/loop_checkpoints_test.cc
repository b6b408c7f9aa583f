// LoopCheckpoints with ranks as threads (Gloo over an in-memory store): no
// checkpoint yet, a checkpoint saved by rank 0 restored on every rank (the
// hook's state too, and every rank's per-rank state gathered bit for bit),
// and damaged files failing every rank alike.
#include "trainer/loop_checkpoints.h"

#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "data/loader.h"
#include "dist/backend/backend_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/trainer_testing.h"

namespace dtrain::trainer {
namespace {

using ::testing::AllOf;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::StartsWith;

using testing::Gloo;

std::string TempDir(const std::string& name) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/", name);
  std::filesystem::remove_all(dir);
  return dir;
}

// 12 examples of 1x2x2, shuffled over the ranks, 2 per batch.
std::unique_ptr<data::DataLoader> Loader(int rank, int world_size) {
  absl::StatusOr<data::Dataset> dataset =
      data::Dataset::Create("tiny", torch::zeros({12, 1, 2, 2}, torch::kUInt8),
                            torch::zeros({12}, torch::kLong), 2);
  data::DistributedSamplerOptions share;
  share.num_replicas = world_size;
  share.rank = rank;
  absl::StatusOr<data::DistributedSampler> sampler =
      data::DistributedSampler::Create(12, share);
  absl::StatusOr<data::TransformPipeline> transforms =
      data::TransformPipeline::Builder().ToFloat().Build();
  data::LoaderOptions options;
  options.batch_size = 2;
  absl::StatusOr<std::unique_ptr<data::DataLoader>> loader =
      data::DataLoader::Create(*dataset, *std::move(sampler), *transforms,
                               options);
  EXPECT_TRUE(loader.ok()) << loader.status();
  return loader.ok() ? *std::move(loader) : nullptr;
}

TEST(LoopCheckpointsTest, WithoutACheckpointEveryRankStartsAtZero) {
  const std::string dir = TempDir("empty");
  backend::testing::RunRanks(2, Gloo, [&](backend::Backend& b) {
    absl::StatusOr<LoopCheckpoints> checkpoints = LoopCheckpoints::Open(dir, b);
    ASSERT_TRUE(checkpoints.ok()) << checkpoints.status();
    torch::nn::Linear model(4, 2);
    torch::optim::SGD optimizer(model->parameters(), 0.1);
    HookState hook{"left over", {{"x", torch::ones({1})}}, {}};
    absl::StatusOr<TrainingState> state =
        checkpoints->Resume(*model, optimizer, nullptr, &hook);
    ASSERT_TRUE(state.ok()) << state.status();
    EXPECT_EQ(*state, TrainingState());
    EXPECT_EQ(hook.name, "");
    EXPECT_TRUE(hook.tensors.empty());
    EXPECT_FALSE(checkpoints->resumed());
    EXPECT_EQ(checkpoints->resumed_from(), "");
  });
  // Rank 0 created the directory.
  EXPECT_TRUE(std::filesystem::is_directory(dir));
}

TEST(LoopCheckpointsTest, RankZeroSavesAndEveryRankResumes) {
  const std::string dir = TempDir("saved");
  // Rank 0 saves a model, its momentum and a loader's position; other ranks
  // write nothing.
  torch::manual_seed(1);
  torch::nn::Linear saved(4, 2);
  torch::optim::SGD saved_optimizer(
      saved->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  saved->forward(torch::ones({3, 4})).sum().backward();
  saved_optimizer.step();
  backend::testing::RunRanks(2, Gloo, [&](backend::Backend& b) {
    absl::StatusOr<LoopCheckpoints> checkpoints = LoopCheckpoints::Open(dir, b);
    ASSERT_TRUE(checkpoints.ok()) << checkpoints.status();
    std::unique_ptr<data::DataLoader> loader = Loader(b.rank(), b.size());
    ASSERT_NE(loader, nullptr);
    loader->SetEpoch(1);
    ASSERT_TRUE(loader->Next().ok());
    absl::StatusOr<std::string> path =
        checkpoints->Save(*saved, saved_optimizer, /*global_step=*/7, *loader);
    ASSERT_TRUE(path.ok()) << path.status();
    EXPECT_EQ(*path, b.rank() == 0 ? dir + "/checkpoint-000000007.dtc" : "");
  });

  std::vector<std::vector<torch::Tensor>> restored(2);
  backend::testing::RunRanks(2, Gloo, [&](backend::Backend& b) {
    absl::StatusOr<LoopCheckpoints> checkpoints = LoopCheckpoints::Open(dir, b);
    ASSERT_TRUE(checkpoints.ok()) << checkpoints.status();
    torch::nn::Linear model(4, 2);  // other weights
    torch::optim::SGD optimizer(model->parameters(),
                                torch::optim::SGDOptions(0.1).momentum(0.9));
    std::unique_ptr<data::DataLoader> loader = Loader(b.rank(), b.size());
    ASSERT_NE(loader, nullptr);
    absl::StatusOr<TrainingState> state =
        checkpoints->Resume(*model, optimizer, loader.get());
    ASSERT_TRUE(state.ok()) << state.status();
    EXPECT_EQ(state->global_step, 7);
    EXPECT_EQ(state->epoch, 1);
    EXPECT_EQ(loader->state().epoch, 1);
    EXPECT_EQ(loader->state().position, 2);
    EXPECT_EQ(state->sampler, loader->state());
    if (b.rank() == 0) {
      EXPECT_THAT(checkpoints->resumed_from(),
                  EndsWith("checkpoint-000000007.dtc"));
    } else {
      EXPECT_EQ(checkpoints->resumed_from(), "");
    }
    // The momentum came back too: one more step moves alike.
    model->forward(torch::ones({3, 4})).sum().backward();
    optimizer.step();
    restored[b.rank()] = model->parameters();
  });
  saved_optimizer.zero_grad();
  saved->forward(torch::ones({3, 4})).sum().backward();
  saved_optimizer.step();
  for (const std::vector<torch::Tensor>& params : restored) {
    ASSERT_EQ(params.size(), 2u);
    EXPECT_TRUE(torch::equal(params[0], saved->weight));
    EXPECT_TRUE(torch::equal(params[1], saved->bias));
  }
}

// Rank 0's hook state is what every rank gets back.
TEST(LoopCheckpointsTest, TheHookStateOfRankZeroReachesEveryRank) {
  const std::string dir = TempDir("hook");
  std::vector<HookState> resumed(2);
  backend::testing::RunRanks(2, Gloo, [&](backend::Backend& b) {
    absl::StatusOr<LoopCheckpoints> checkpoints = LoopCheckpoints::Open(dir, b);
    ASSERT_TRUE(checkpoints.ok()) << checkpoints.status();
    torch::nn::Linear model(4, 2);
    torch::optim::SGD optimizer(model->parameters(), 0.1);
    std::unique_ptr<data::DataLoader> loader = Loader(b.rank(), b.size());
    ASSERT_NE(loader, nullptr);
    const HookState hook{
        "local_sgd",
        {{"local_sgd.steps",
          torch::scalar_tensor(b.rank() == 0 ? 5 : 99, torch::kLong)}},
        {}};
    ASSERT_TRUE(
        checkpoints->Save(*model, optimizer, /*global_step=*/5, *loader, hook)
            .ok());
    ASSERT_TRUE(
        checkpoints->Resume(*model, optimizer, nullptr, &resumed[b.rank()])
            .ok());
  });
  for (const HookState& hook : resumed) {
    EXPECT_EQ(hook.name, "local_sgd");
    ASSERT_EQ(hook.tensors.size(), 1u);
    EXPECT_EQ(hook.tensors[0].first, "local_sgd.steps");
    EXPECT_EQ(hook.tensors[0].second.item<int64_t>(), 5);
  }
}

bool SameBits(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) {
    return false;
  }
  const torch::Tensor ca = a.contiguous();
  const torch::Tensor cb = b.contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

// Rank r's per-rank entries: one larger than a gather chunk (with a -0.0
// and a NaN, which a float sum could alter), one of 6 bytes, an int64.
std::vector<std::pair<std::string, torch::Tensor>> RankEntries(int r) {
  const int64_t n =
      LoopCheckpoints::kRankStateChunkBytes / 4 + 1000;  // over one chunk
  torch::Tensor big = torch::arange(n, torch::kFloat) + 1000 * r;
  big[0] = -0.0f;
  big[n - 1] = std::numeric_limits<float>::quiet_NaN();
  return {{"big", big},
          {"half", torch::tensor({0.5, -1.0, 2.0 + r}).to(torch::kHalf)},
          {"r", torch::scalar_tensor(r, torch::kLong)}};
}

// Every rank's own entries reach rank 0 bit for bit, are saved, and come
// back on resume; a rank whose entries differ in layout fails every rank.
TEST(LoopCheckpointsTest, EveryRanksOwnStateIsGatheredSavedAndResumed) {
  constexpr int kRanks = 3;
  const std::string dir = TempDir("rank_state");
  std::vector<HookState> resumed(kRanks);
  backend::testing::RunRanks(kRanks, Gloo, [&](backend::Backend& b) {
    absl::StatusOr<LoopCheckpoints> checkpoints = LoopCheckpoints::Open(dir, b);
    ASSERT_TRUE(checkpoints.ok()) << checkpoints.status();
    HookState hook;
    ASSERT_TRUE(checkpoints->GatherRankState({}, &hook).ok());
    EXPECT_TRUE(hook.ranks.empty());
    ASSERT_TRUE(
        checkpoints->GatherRankState(RankEntries(b.rank()), &hook).ok());
    if (b.rank() != 0) {
      EXPECT_TRUE(hook.ranks.empty());
    } else {
      ASSERT_EQ(hook.ranks.size(), static_cast<size_t>(kRanks));
      for (int r = 0; r < kRanks; ++r) {
        const auto want = RankEntries(r);
        ASSERT_EQ(hook.ranks[r].size(), want.size());
        for (size_t i = 0; i < want.size(); ++i) {
          EXPECT_EQ(hook.ranks[r][i].first, want[i].first);
          EXPECT_TRUE(SameBits(hook.ranks[r][i].second, want[i].second))
              << "rank " << r << " " << want[i].first;
        }
      }
    }
    hook.name = "h";
    torch::nn::Linear model(4, 2);
    torch::optim::SGD optimizer(model->parameters(), 0.1);
    std::unique_ptr<data::DataLoader> loader = Loader(b.rank(), b.size());
    ASSERT_NE(loader, nullptr);
    ASSERT_TRUE(
        checkpoints->Save(*model, optimizer, /*global_step=*/5, *loader, hook)
            .ok());
    ASSERT_TRUE(
        checkpoints->Resume(*model, optimizer, nullptr, &resumed[b.rank()])
            .ok());

    // Rank 1 with another shape: every rank fails alike, nothing waits.
    auto mine = RankEntries(b.rank());
    if (b.rank() == 1) mine[1].second = torch::zeros({4}, torch::kHalf);
    absl::Status s = checkpoints->GatherRankState(mine, &hook);
    EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
    EXPECT_THAT(
        std::string(s.message()),
        AllOf(StartsWith(absl::StrCat("[rank ", b.rank(), "] checkpoint: ")),
              HasSubstr("per-rank communication hook states differ "
                        "(entries 3 to 3, bytes")));
  });
  for (int r = 0; r < kRanks; ++r) {
    const auto want = RankEntries(r);
    ASSERT_EQ(resumed[r].ranks.size(), static_cast<size_t>(kRanks));
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_TRUE(SameBits(resumed[r].ranks[r][i].second, want[i].second))
          << "rank " << r << " " << want[i].first;
    }
  }
}

TEST(LoopCheckpointsTest, SavesTheStateItIsGiven) {
  const std::string dir = TempDir("state");
  backend::testing::RunRanks(1, Gloo, [&](backend::Backend& b) {
    absl::StatusOr<LoopCheckpoints> checkpoints = LoopCheckpoints::Open(dir, b);
    ASSERT_TRUE(checkpoints.ok()) << checkpoints.status();
    torch::nn::Linear model(4, 2);
    torch::optim::SGD optimizer(model->parameters(), 0.1);
    TrainingState state;
    state.epoch = state.sampler.epoch = 3;
    state.global_step = 12;
    state.best_top1 = 50;
    state.model_name = "linear";
    state.optimizer_name = "sgd";
    ASSERT_TRUE(checkpoints->Save(*model, optimizer, state).ok());
    state.global_step = 13;
    ASSERT_TRUE(checkpoints->Save(*model, optimizer, state).ok());
    absl::StatusOr<TrainingState> resumed =
        checkpoints->Resume(*model, optimizer);
    ASSERT_TRUE(resumed.ok()) << resumed.status();
    EXPECT_EQ(*resumed, state);
    EXPECT_THAT(checkpoints->resumed_from(),
                EndsWith("checkpoint-000000013.dtc"));
  });
}

TEST(LoopCheckpointsTest, ADamagedNewerFileIsSkippedAndNamed) {
  const std::string dir = TempDir("skipped");
  backend::testing::RunRanks(2, Gloo, [&](backend::Backend& b) {
    absl::StatusOr<LoopCheckpoints> checkpoints = LoopCheckpoints::Open(dir, b);
    ASSERT_TRUE(checkpoints.ok()) << checkpoints.status();
    torch::nn::Linear model(4, 2);
    torch::optim::SGD optimizer(model->parameters(), 0.1);
    TrainingState state;
    state.global_step = 4;
    ASSERT_TRUE(checkpoints->Save(*model, optimizer, state).ok());
    if (b.rank() == 0) {
      std::ofstream(dir + "/checkpoint-000000009.dtc") << "not a checkpoint";
    }
    absl::StatusOr<TrainingState> resumed =
        checkpoints->Resume(*model, optimizer);
    ASSERT_TRUE(resumed.ok()) << resumed.status();
    EXPECT_EQ(resumed->global_step, 4);
    EXPECT_TRUE(checkpoints->resumed());
    if (b.rank() == 0) {
      ASSERT_EQ(checkpoints->skipped().size(), 1u);
      EXPECT_THAT(checkpoints->skipped()[0],
                  HasSubstr("checkpoint-000000009.dtc: "));
    } else {
      EXPECT_TRUE(checkpoints->skipped().empty());
    }
  });
}

TEST(LoopCheckpointsTest, TheBestIsSavedFromTheSameBytes) {
  const std::string dir = TempDir("best");
  backend::testing::RunRanks(1, Gloo, [&](backend::Backend& b) {
    absl::StatusOr<LoopCheckpoints> checkpoints = LoopCheckpoints::Open(dir, b);
    ASSERT_TRUE(checkpoints.ok()) << checkpoints.status();
    torch::nn::Linear model(4, 2);
    torch::optim::SGD optimizer(model->parameters(), 0.1);
    TrainingState state;
    state.global_step = 7;
    absl::StatusOr<std::string> path =
        checkpoints->Save(*model, optimizer, state, {}, /*also_best=*/true);
    ASSERT_TRUE(path.ok()) << path.status();
    auto read = [](const std::string& p) {
      std::ifstream in(p, std::ios::binary);
      return std::string(std::istreambuf_iterator<char>(in), {});
    };
    EXPECT_EQ(read(dir + "/best.dtc"), read(*path));
  });
}

TEST(LoopCheckpointsTest, ACheckpointOfAnotherModelOrOptimizerIsRefused) {
  const std::string dir = TempDir("names");
  backend::testing::RunRanks(2, Gloo, [&](backend::Backend& b) {
    torch::nn::Linear model(4, 2);
    torch::optim::SGD optimizer(model->parameters(), 0.1);
    {
      absl::StatusOr<LoopCheckpoints> checkpoints =
          LoopCheckpoints::Open(dir, b);
      ASSERT_TRUE(checkpoints.ok()) << checkpoints.status();
      TrainingState state;
      state.model_name = "linear";
      state.optimizer_name = "sgd";
      ASSERT_TRUE(checkpoints->Save(*model, optimizer, state).ok());
    }
    LoopCheckpointOptions options;
    options.model_name = "convnet";
    absl::StatusOr<LoopCheckpoints> checkpoints =
        LoopCheckpoints::Open(dir, b, options);
    ASSERT_TRUE(checkpoints.ok()) << checkpoints.status();
    absl::StatusOr<TrainingState> resumed =
        checkpoints->Resume(*model, optimizer);
    EXPECT_EQ(resumed.status().code(), absl::StatusCode::kFailedPrecondition)
        << resumed.status();
    EXPECT_THAT(std::string(resumed.status().message()),
                AllOf(HasSubstr("linear"), HasSubstr("convnet")));
  });
}

TEST(LoopCheckpointsTest, DamagedCheckpointsFailEveryRank) {
  const std::string dir = TempDir("damaged");
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/checkpoint-000000003.dtc") << "not a checkpoint";
  backend::testing::RunRanks(2, Gloo, [&](backend::Backend& b) {
    absl::StatusOr<LoopCheckpoints> checkpoints = LoopCheckpoints::Open(dir, b);
    ASSERT_TRUE(checkpoints.ok()) << checkpoints.status();
    torch::nn::Linear model(4, 2);
    torch::optim::SGD optimizer(model->parameters(), 0.1);
    absl::StatusOr<TrainingState> state =
        checkpoints->Resume(*model, optimizer);
    if (b.rank() == 0) {
      EXPECT_EQ(state.status().code(), absl::StatusCode::kDataLoss);
      EXPECT_THAT(std::string(state.status().message()),
                  HasSubstr("checkpoint-000000003.dtc"));
    } else {
      // Every rank says why, not only rank 0.
      EXPECT_EQ(state.status().code(), absl::StatusCode::kDataLoss);
      EXPECT_THAT(
          std::string(state.status().message()),
          AllOf(StartsWith("rank 0: "), HasSubstr("checkpoint-000000003.dtc")));
    }
  });
}

TEST(LoopCheckpointsTest, AnEmptyPathIsRefused) {
  backend::testing::RunRanks(1, Gloo, [&](backend::Backend& b) {
    absl::StatusOr<LoopCheckpoints> checkpoints = LoopCheckpoints::Open("", b);
    EXPECT_EQ(checkpoints.status().code(), absl::StatusCode::kInvalidArgument);
  });
}

}  // namespace
}  // namespace dtrain::trainer
