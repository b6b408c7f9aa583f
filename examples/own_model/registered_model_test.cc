// The registered "mlp" works wherever the project takes a model: the
// registry, summaries, state_dict files and checkpoints.
#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/model.h"
#include "models/registry.h"
#include "models/state_dict/state_dict.h"
#include "models/summary.h"
#include "trainer/checkpoint/checkpoint.h"

namespace dtrain::examples {
namespace {

using ::testing::ElementsAre;
using ::testing::EndsWith;
using ::testing::HasSubstr;

constexpr int64_t kParameters = 784 * 128 + 128 + 128 * 10 + 10;

std::shared_ptr<models::Model> Mlp(uint64_t seed) {
  torch::manual_seed(seed);
  absl::StatusOr<std::shared_ptr<models::Model>> model =
      models::CreateModel("mlp");
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *model : nullptr;
}

void ExpectSameParameters(const torch::nn::Module& a,
                          const torch::nn::Module& b) {
  for (const auto& p : a.named_parameters()) {
    EXPECT_TRUE(torch::equal(p.value(), b.named_parameters()[p.key()]))
        << p.key();
  }
}

TEST(RegisteredModelTest, TheRegistryKnowsIt) {
  absl::StatusOr<models::ModelInfo> info = models::FindModel("mlp");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->default_num_classes, 10);
  EXPECT_THAT(info->default_input_shape, ElementsAre(1, 28, 28));
  EXPECT_THAT(models::KnownModelNames(), HasSubstr("mlp"));

  std::shared_ptr<models::Model> model = Mlp(0);
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(models::NumParameters(*model), kParameters);
  EXPECT_THAT(model->named_parameters().keys(),
              ElementsAre("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"));
  EXPECT_THAT(model->forward(torch::zeros({5, 1, 28, 28})).sizes().vec(),
              ElementsAre(5, 10));

  // The trainer passes the data's shape and classes on.
  models::ModelConfig config;
  config.in_channels = 3;
  config.image_size = 8;
  config.num_classes = 4;
  absl::StatusOr<std::shared_ptr<models::Model>> small =
      models::CreateModel("mlp", config);
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_THAT((*small)->forward(torch::zeros({2, 3, 8, 8})).sizes().vec(),
              ElementsAre(2, 4));
  config.small_input_stem = true;
  EXPECT_EQ(models::CreateModel("mlp", config).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RegisteredModelTest, SameSeedSameWeights) {
  std::shared_ptr<models::Model> a = Mlp(3);
  std::shared_ptr<models::Model> b = Mlp(3);
  std::shared_ptr<models::Model> c = Mlp(4);
  ASSERT_TRUE(a && b && c);
  ExpectSameParameters(*a, *b);
  EXPECT_FALSE(torch::equal(a->named_parameters()["fc1.weight"],
                            c->named_parameters()["fc1.weight"]));
}

TEST(RegisteredModelTest, ShapeErrorsNameTheExpectedInput) {
  std::shared_ptr<models::Model> model = Mlp(0);
  ASSERT_NE(model, nullptr);
  try {
    model->forward(torch::zeros({2, 3, 28, 28}));
    ADD_FAILURE() << "no error for 3 channels";
  } catch (const c10::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("mlp expects input of 784 values"));
  }
}

TEST(RegisteredModelTest, SummarizesLayerByLayer) {
  std::shared_ptr<models::Model> model = Mlp(0);
  ASSERT_NE(model, nullptr);
  absl::StatusOr<models::ModelSummary> summary =
      models::Summarize(*model, {1, 28, 28});
  ASSERT_TRUE(summary.ok()) << summary.status();
  std::vector<std::string> paths;
  for (const models::TracedLayer& layer : summary->layers) {
    paths.push_back(layer.path);
  }
  EXPECT_THAT(paths, ElementsAre("", "flatten", "fc1", "relu", "fc2"));
  EXPECT_THAT(summary->layers.back().output_shape, ElementsAre(1, 10));
  EXPECT_EQ(summary->total_params, kParameters);
  EXPECT_THAT(models::FormatSummary(*summary),
              EndsWith("Total params: 101,770\n"));
}

TEST(RegisteredModelTest, StateDictFilesRoundTrip) {
  std::shared_ptr<models::Model> saved = Mlp(1);
  std::shared_ptr<models::Model> loaded = Mlp(2);
  ASSERT_TRUE(saved && loaded);
  for (const char* extension : {".safetensors", ".pt"}) {
    const std::string path =
        absl::StrCat(::testing::TempDir(), "/mlp", extension);
    ASSERT_TRUE(models::state_dict::SaveStateDict(*saved, path).ok());
    const absl::Status status =
        models::state_dict::LoadStateDict(path, *loaded);
    ASSERT_TRUE(status.ok()) << status;
    ExpectSameParameters(*saved, *loaded);
  }
}

TEST(RegisteredModelTest, CheckpointsRoundTrip) {
  std::shared_ptr<models::Model> saved = Mlp(1);
  ASSERT_NE(saved, nullptr);
  torch::optim::SGD optimizer(saved->parameters(),
                              torch::optim::SGDOptions(0.1).momentum(0.9));
  saved->forward(torch::ones({2, 1, 28, 28})).sum().backward();
  optimizer.step();
  trainer::TrainingState state;
  state.global_step = 1;
  state.model_name = "mlp";
  state.optimizer_name = "sgd";
  absl::StatusOr<std::string> bytes =
      trainer::EncodeCheckpoint(*saved, optimizer, state);
  ASSERT_TRUE(bytes.ok()) << bytes.status();

  std::shared_ptr<models::Model> loaded = Mlp(2);
  ASSERT_NE(loaded, nullptr);
  torch::optim::SGD loaded_optimizer(
      loaded->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  absl::StatusOr<trainer::TrainingState> decoded = trainer::DecodeCheckpoint(
      *bytes, *loaded, loaded_optimizer, "mlp", "sgd");
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, state);
  ExpectSameParameters(*saved, *loaded);
}

}  // namespace
}  // namespace dtrain::examples
