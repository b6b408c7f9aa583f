#include "models/registry.h"

#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/linear.h>
#include <torch/utils.h>

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/convnet.h"
#include "models/resnet.h"

namespace dtrain::models {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

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

// A model whose registration the linker left out is unknown too; the message
// names the fix.
TEST(RegistryTest, UnknownNameHintsAtAlwayslink) {
  const absl::Status status = FindModel("mlp").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("(a model registered with ModelRegistration or "
                        "RegisterModel in a cc_library is linked only with "
                        "alwayslink = True on that library)"));
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

// The tests below register models, for the rest of the process: the tests
// above, which gtest runs first, see the built-in models only.

// A user's model: one linear layer over the flattened image. Records the
// config its factory was given.
class TinyModel : public Model {
 public:
  explicit TinyModel(const ModelConfig& config)
      : Model("TinyModel"), config_(config) {
    fc_ = register_module(
        "fc", torch::nn::Linear(
                  *config.in_channels * *config.image_size * *config.image_size,
                  *config.num_classes));
  }
  torch::Tensor Forward(const torch::Tensor& input,
                        LayerTrace* trace) override {
    return TracedForward(trace, "fc", fc_, input.flatten(1));
  }
  const ModelConfig& config() const { return config_; }

 private:
  ModelConfig config_;
  torch::nn::Linear fc_{nullptr};
};

absl::StatusOr<std::shared_ptr<Model>> CreateTiny(const ModelConfig& config) {
  if (config.small_input_stem) {
    return absl::InvalidArgumentError("tiny has no small_input_stem option");
  }
  return std::shared_ptr<Model>(std::make_shared<TinyModel>(config));
}

ModelInfo TinyInfo(std::string name) {
  return {std::move(name), "one linear layer", 3, {1, 4, 4}};
}

std::vector<std::string> KnownNames() {
  std::vector<std::string> names;
  for (const ModelInfo& info : KnownModels()) names.push_back(info.name);
  return names;
}

TEST(RegistryTest, RegisteredModelsAreKnownAndBuilt) {
  ASSERT_TRUE(RegisterModel(TinyInfo("tiny"), &CreateTiny).ok());
  ASSERT_TRUE(RegisterModel(TinyInfo("a-tiny_2"), &CreateTiny).ok());
  std::vector<std::string> names = KnownNames();
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_THAT(names, Contains("tiny"));
  EXPECT_THAT(names, Contains("a-tiny_2"));
  EXPECT_THAT(names, Contains("convnet"));
  EXPECT_THAT(KnownModelNames(), HasSubstr("a-tiny_2, convnet, resnet18"));
  EXPECT_THAT(std::string(FindModel("nothing").status().message()),
              HasSubstr("tiny"));

  absl::StatusOr<ModelInfo> info = FindModel("tiny");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->description, "one linear layer");
  EXPECT_EQ(info->default_num_classes, 3);
  EXPECT_THAT(info->default_input_shape, ElementsAre(1, 4, 4));

  // Unset fields come from the defaults; set ones are passed on.
  absl::StatusOr<std::shared_ptr<Model>> model = CreateModel("tiny");
  ASSERT_TRUE(model.ok()) << model.status();
  auto tiny = std::dynamic_pointer_cast<TinyModel>(*model);
  ASSERT_NE(tiny, nullptr);
  EXPECT_EQ(tiny->config().num_classes, 3);
  EXPECT_EQ(tiny->config().in_channels, 1);
  EXPECT_EQ(tiny->config().image_size, 4);
  EXPECT_THAT(tiny->forward(torch::zeros({2, 1, 4, 4})).sizes().vec(),
              ElementsAre(2, 3));
  ModelConfig config;
  config.num_classes = 5;
  config.in_channels = 2;
  config.image_size = 3;
  model = CreateModel("tiny", config);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(NumParameters(**model), 2 * 3 * 3 * 5 + 5);
  EXPECT_THAT((*model)->named_parameters().keys(),
              ElementsAre("fc.weight", "fc.bias"));

  // The factory's own refusal comes back as it is.
  config.small_input_stem = true;
  model = CreateModel("tiny", config);
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(model.status().message()),
              HasSubstr("no small_input_stem"));

  // Same seed, same weights, as for the built-in models.
  torch::manual_seed(5);
  auto a = CreateModel("tiny");
  torch::manual_seed(5);
  auto b = CreateModel("tiny");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(torch::equal((*a)->named_parameters()["fc.weight"],
                           (*b)->named_parameters()["fc.weight"]));
}

TEST(RegistryTest, DuplicateAndBuiltInNamesAreRefused) {
  ASSERT_TRUE(RegisterModel(TinyInfo("twice"), &CreateTiny).ok());
  absl::Status again =
      RegisterModel({"twice", "another model", 10, {1, 28, 28}}, &CreateTiny);
  EXPECT_EQ(again.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(std::string(again.message()),
              HasSubstr("cannot register model \"twice\": a model of that "
                        "name is already registered (one linear layer)"));
  // The first registration stays.
  EXPECT_EQ(FindModel("twice")->description, "one linear layer");

  for (const char* built_in : {"convnet", "resnet18"}) {
    absl::Status clash = RegisterModel(TinyInfo(built_in), &CreateTiny);
    EXPECT_EQ(clash.code(), absl::StatusCode::kAlreadyExists) << built_in;
    EXPECT_THAT(std::string(clash.message()),
                HasSubstr(absl::StrCat("cannot register model \"", built_in,
                                       "\": a built-in model has that name")));
    EXPECT_THAT(std::string(clash.message()), HasSubstr("known models: "));
  }
  // The built-in model is still the one built.
  auto convnet = CreateModel("convnet");
  ASSERT_TRUE(convnet.ok());
  EXPECT_NE(std::dynamic_pointer_cast<ConvNetImpl>(*convnet), nullptr);
}

TEST(RegistryTest, MalformedRegistrationsAreRefused) {
  struct Case {
    ModelInfo info;
    std::string message;
  };
  ModelInfo no_description = TinyInfo("no-description");
  no_description.description.clear();
  ModelInfo no_classes = TinyInfo("no-classes");
  no_classes.default_num_classes = 0;
  ModelInfo flat = TinyInfo("flat");
  flat.default_input_shape = {784};
  ModelInfo zero_side = TinyInfo("zero-side");
  zero_side.default_input_shape = {1, 0, 28};
  for (const Case& c : std::vector<Case>{
           {TinyInfo(""), "a name starts with a lowercase letter"},
           {TinyInfo("Mlp"), "a name starts with a lowercase letter"},
           {TinyInfo("9net"), "a name starts with a lowercase letter"},
           {TinyInfo("my mlp"), "a name starts with a lowercase letter"},
           {TinyInfo("mlp=2"), "a name starts with a lowercase letter"},
           {no_description, "the description is empty"},
           {no_classes, "default_num_classes must be positive, got 0"},
           {flat, "default_input_shape must be three positive sizes"},
           {zero_side, "got [1, 0, 28]"}}) {
    absl::Status status = RegisterModel(c.info, &CreateTiny);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.info.name;
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.message));
    EXPECT_FALSE(FindModel(c.info.name).ok()) << c.info.name;
  }
  absl::Status null_factory = RegisterModel(TinyInfo("null"), nullptr);
  EXPECT_EQ(null_factory.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(null_factory.message()),
              HasSubstr("the factory is null"));
  EXPECT_FALSE(FindModel("null").ok());
}

TEST(RegistryTest, FactoryFailuresBecomeStatuses) {
  ASSERT_TRUE(
      RegisterModel(
          TinyInfo("throws"),
          [](const ModelConfig&) -> absl::StatusOr<std::shared_ptr<Model>> {
            throw std::runtime_error("bad layer");
          })
          .ok());
  auto thrown = CreateModel("throws");
  EXPECT_EQ(thrown.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(thrown.status().message()),
              HasSubstr("building throws: bad layer"));

  ASSERT_TRUE(
      RegisterModel(
          TinyInfo("returns-null"),
          [](const ModelConfig&) -> absl::StatusOr<std::shared_ptr<Model>> {
            return std::shared_ptr<Model>();
          })
          .ok());
  auto null = CreateModel("returns-null");
  EXPECT_EQ(null.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(null.status().message()),
              HasSubstr("its factory returned no model"));
}

TEST(RegistryTest, ModelRegistrationRegistersOrStopsTheProgram) {
  const ModelRegistration registration(TinyInfo("by-object"), &CreateTiny);
  EXPECT_TRUE(FindModel("by-object").ok());
  EXPECT_DEATH(ModelRegistration(TinyInfo("by-object"), &CreateTiny),
               "cannot register model \"by-object\": a model of that name "
               "is already registered");
  EXPECT_DEATH(ModelRegistration(TinyInfo("convnet"), &CreateTiny),
               "a built-in model has that name");
}

TEST(RegistryTest, RegistersAndBuildsFromManyThreads) {
  constexpr int kThreads = 8;
  std::atomic<int> won{0};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &won, &failures] {
      // Each thread registers a name of its own and races for a shared one,
      // while reading and building.
      if (!RegisterModel(TinyInfo(absl::StrCat("thread-", t)), &CreateTiny)
               .ok()) {
        failures.fetch_add(1);
      }
      if (RegisterModel(TinyInfo("contested"), &CreateTiny).ok()) {
        won.fetch_add(1);
      }
      for (int i = 0; i < 20; ++i) {
        if (KnownModels().empty() || !CreateModel("convnet").ok()) {
          failures.fetch_add(1);
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(won.load(), 1);
  std::vector<std::string> names = KnownNames();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(
        std::count(names.begin(), names.end(), absl::StrCat("thread-", t)), 1);
  }
  EXPECT_EQ(std::count(names.begin(), names.end(), "contested"), 1);
  EXPECT_THAT(names, Not(Contains("")));
}

}  // namespace
}  // namespace dtrain::models
