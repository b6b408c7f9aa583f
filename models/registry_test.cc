#include "models/registry.h"

#include <torch/nn/modules/batchnorm.h>
#include <torch/utils.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/convnet.h"
#include "models/resnet.h"

namespace dtrain::models {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(RegistryTest, KnowsTheModelsInNameOrder) {
  std::vector<std::string> names;
  for (const ModelInfo& info : KnownModels()) names.push_back(info.name);
  EXPECT_THAT(names, ElementsAre("convnet", "resnet18"));
  EXPECT_EQ(KnownModelNames(), "convnet, resnet18");
  absl::StatusOr<ModelInfo> resnet = FindModel("resnet18");
  ASSERT_TRUE(resnet.ok());
  EXPECT_EQ(resnet->default_num_classes, 1000);
  EXPECT_THAT(resnet->default_input_shape, ElementsAre(3, 224, 224));
  EXPECT_THAT(FindModel("convnet")->default_input_shape,
              ElementsAre(1, 28, 28));
}

TEST(RegistryTest, UnknownNameListsTheKnownOnes) {
  for (const char* name : {"resnet50", "", "ConvNet"}) {
    absl::StatusOr<std::shared_ptr<Model>> model = CreateModel(name);
    EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(model.status().message()),
                HasSubstr(absl::StrCat("unknown model \"", name,
                                       "\"; known models: convnet, resnet18")));
    EXPECT_EQ(FindModel(name).status(), model.status());
  }
}

TEST(RegistryTest, BuildsEachModelWithItsDefaults) {
  absl::StatusOr<std::shared_ptr<Model>> convnet = CreateModel("convnet");
  ASSERT_TRUE(convnet.ok()) << convnet.status();
  ASSERT_NE(std::dynamic_pointer_cast<ConvNetImpl>(*convnet), nullptr);
  EXPECT_EQ(NumParameters(**convnet), 300426);
  EXPECT_THAT((*convnet)->forward(torch::zeros({2, 1, 28, 28})).sizes().vec(),
              ElementsAre(2, 10));

  absl::StatusOr<std::shared_ptr<Model>> resnet = CreateModel("resnet18");
  ASSERT_TRUE(resnet.ok()) << resnet.status();
  ASSERT_NE(std::dynamic_pointer_cast<ResNet18Impl>(*resnet), nullptr);
  EXPECT_EQ(NumParameters(**resnet), 11689512);
}

TEST(RegistryTest, PassesTheOptionsOn) {
  ModelConfig config;
  config.num_classes = 10;
  auto resnet = CreateModel("resnet18", config);
  ASSERT_TRUE(resnet.ok());
  EXPECT_EQ(NumParameters(**resnet), 11181642);

  config.small_input_stem = true;
  config.in_channels = 1;
  config.image_size = 28;
  resnet = CreateModel("resnet18", config);
  ASSERT_TRUE(resnet.ok());
  const auto& options =
      std::dynamic_pointer_cast<ResNet18Impl>(*resnet)->options();
  EXPECT_TRUE(options.small_input_stem);
  EXPECT_EQ(options.in_channels, 1);
  (*resnet)->eval();
  EXPECT_THAT((*resnet)->forward(torch::zeros({2, 1, 28, 28})).sizes().vec(),
              ElementsAre(2, 10));

  // The norm layer reaches ResNet-18; the ConvNet has no batch norm.
  int norm_layers = 0;
  config.norm_layer = [&norm_layers](int64_t channels) {
    ++norm_layers;
    return torch::nn::AnyModule(torch::nn::BatchNorm2d(channels));
  };
  ASSERT_TRUE(CreateModel("resnet18", config).ok());
  EXPECT_EQ(norm_layers, 20);
  EXPECT_TRUE(FindModel("resnet18")->batch_norm);
  EXPECT_FALSE(FindModel("convnet")->batch_norm);

  ModelConfig convnet_config;
  convnet_config.num_classes = 7;
  convnet_config.in_channels = 3;
  convnet_config.image_size = 32;
  auto convnet = CreateModel("convnet", convnet_config);
  ASSERT_TRUE(convnet.ok());
  EXPECT_THAT((*convnet)->forward(torch::zeros({2, 3, 32, 32})).sizes().vec(),
              ElementsAre(2, 7));
}

TEST(RegistryTest, OptionsOutOfRangeAreInvalidArguments) {
  struct Case {
    std::string model;
    ModelConfig config;
    std::string message;
  };
  ModelConfig zero_classes;
  zero_classes.num_classes = 0;
  ModelConfig stem;
  stem.small_input_stem = true;
  ModelConfig tiny;
  tiny.image_size = 4;
  ModelConfig negative_size;
  negative_size.image_size = -2;
  ModelConfig no_channels;
  no_channels.in_channels = 0;
  for (const Case& c : std::vector<Case>{
           {"convnet", zero_classes, "num_classes must be positive, got 0"},
           {"resnet18", zero_classes, "num_classes must be positive, got 0"},
           {"convnet", stem, "convnet has no small_input_stem option"},
           {"convnet", tiny, "image_size must be at least 6"},
           {"resnet18", negative_size, "image_size must be positive"},
           {"resnet18", no_channels, "in_channels must be positive"}}) {
    auto model = CreateModel(c.model, c.config);
    EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument)
        << c.model << ": " << c.message;
    EXPECT_THAT(std::string(model.status().message()), HasSubstr(c.message));
  }
}

TEST(RegistryTest, SameSeedSameModel) {
  torch::manual_seed(11);
  auto a = CreateModel("convnet");
  torch::manual_seed(11);
  auto b = CreateModel("convnet");
  ASSERT_TRUE(a.ok() && b.ok());
  (*a)->eval();
  (*b)->eval();
  const torch::Tensor input = torch::randn({3, 1, 28, 28});
  EXPECT_TRUE(torch::equal((*a)->forward(input), (*b)->forward(input)));
}

TEST(RegistryTest, ModelsCloneThroughTheBaseClass) {
  auto model = CreateModel("resnet18");
  ASSERT_TRUE(model.ok());
  std::shared_ptr<Model> copy =
      std::dynamic_pointer_cast<Model>((*model)->clone());
  ASSERT_NE(copy, nullptr);
  EXPECT_EQ(NumParameters(*copy), 11689512);
  EXPECT_TRUE(
      torch::equal(copy->named_parameters()["layer3.1.conv2.weight"],
                   (*model)->named_parameters()["layer3.1.conv2.weight"]));
}

}  // namespace
}  // namespace dtrain::models
