#include "models/convnet.h"

#include <torch/nn/functional/loss.h>
#include <torch/utils.h>

#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::models {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Deterministic input, the same in the Python reference: sin(0.37 * i).
torch::Tensor TestInput(int64_t n, int64_t c, int64_t h, int64_t w) {
  return torch::arange(n * c * h * w, torch::kFloat32)
      .mul(0.37)
      .sin()
      .reshape({n, c, h, w});
}

std::vector<std::pair<std::string, std::vector<int64_t>>> ParameterShapes(
    const torch::nn::Module& module) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  for (const auto& item : module.named_parameters()) {
    out.emplace_back(item.key(), item.value().sizes().vec());
  }
  return out;
}

TEST(ConvNetTest, HasTheBooksParameterCount) {
  ConvNet net;
  EXPECT_EQ(NumParameters(*net), 300426);
}

TEST(ConvNetTest, ParametersAreNamedAndShapedAsInPyTorch) {
  ConvNet net;
  using Shape = std::pair<std::string, std::vector<int64_t>>;
  EXPECT_THAT(
      ParameterShapes(*net),
      ElementsAre(
          Shape{"conv1.weight", {16, 1, 3, 3}}, Shape{"conv1.bias", {16}},
          Shape{"conv2.weight", {32, 16, 3, 3}}, Shape{"conv2.bias", {32}},
          Shape{"fc1.weight", {64, 4608}}, Shape{"fc1.bias", {64}},
          Shape{"fc2.weight", {10, 64}}, Shape{"fc2.bias", {10}}));
  EXPECT_TRUE(net->named_buffers().is_empty());
}

TEST(ConvNetTest, OutputIsLogProbabilitiesPerClass) {
  ConvNet net;
  net->eval();
  for (int64_t batch : {1, 7, 32}) {
    const torch::Tensor out = net->forward(torch::randn({batch, 1, 28, 28}));
    EXPECT_THAT(out.sizes().vec(), ElementsAre(batch, 10));
    EXPECT_TRUE(torch::allclose(out.exp().sum(1), torch::ones({batch})));
  }
}

TEST(ConvNetTest, OptionsChangeChannelsClassesAndImageSize) {
  ConvNetOptions options;
  options.in_channels = 3;
  options.num_classes = 5;
  options.image_size = 32;
  ConvNet net(options);
  // fc1: 32 channels * 14 * 14 after two convolutions and the pool.
  EXPECT_THAT(net->named_parameters()["fc1.weight"].sizes().vec(),
              ElementsAre(64, 6272));
  EXPECT_THAT(net->forward(torch::randn({4, 3, 32, 32})).sizes().vec(),
              ElementsAre(4, 5));
  // The smallest image: 6 -> 4 -> 2 -> 1 pixel.
  options.image_size = 6;
  EXPECT_THAT(
      ConvNet(options)->forward(torch::randn({2, 3, 6, 6})).sizes().vec(),
      ElementsAre(2, 5));
}

TEST(ConvNetTest, RejectsInputOfTheWrongShape) {
  ConvNet net;
  for (const auto& shape : std::vector<std::vector<int64_t>>{
           {2, 3, 28, 28}, {2, 1, 32, 32}, {1, 28, 28}}) {
    try {
      net->forward(torch::zeros(shape));
      ADD_FAILURE() << "no error for input " << torch::IntArrayRef(shape);
    } catch (const c10::Error& e) {
      EXPECT_THAT(e.what_without_backtrace(),
                  HasSubstr("ConvNet expects input of shape [N, 1, 28, 28]"));
    }
  }
}

TEST(ConvNetTest, ValidateNamesTheBadField) {
  ConvNetOptions options;
  EXPECT_TRUE(Validate(options).ok());
  options.image_size = 5;
  EXPECT_EQ(Validate(options).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(Validate(options).message()),
              HasSubstr("image_size must be at least 6"));
  options = ConvNetOptions();
  options.num_classes = 0;
  EXPECT_THAT(std::string(Validate(options).message()),
              HasSubstr("num_classes"));
  options = ConvNetOptions();
  options.in_channels = -1;
  EXPECT_THAT(std::string(Validate(options).message()),
              HasSubstr("in_channels"));
  EXPECT_THROW(ConvNet{options}, c10::Error);
}

TEST(ConvNetTest, SameSeedGivesSameWeightsAndOutputs) {
  const torch::Tensor input = TestInput(8, 1, 28, 28);
  auto run = [&](uint64_t seed) {
    torch::manual_seed(seed);
    ConvNet net;
    // Train mode: the dropout masks come from the same generator.
    return std::make_pair(net, net->forward(input));
  };
  auto [net_a, out_a] = run(7);
  auto [net_b, out_b] = run(7);
  auto [net_c, out_c] = run(8);
  for (const auto& item : net_a->named_parameters()) {
    EXPECT_TRUE(
        torch::equal(item.value(), net_b->named_parameters()[item.key()]))
        << item.key();
  }
  EXPECT_TRUE(torch::equal(out_a, out_b));
  EXPECT_FALSE(torch::allclose(out_a, out_c));
}

TEST(ConvNetTest, DropoutActsOnlyInTraining) {
  ConvNet net;
  const torch::Tensor input = TestInput(16, 1, 28, 28);
  EXPECT_FALSE(torch::equal(net->forward(input), net->forward(input)));
  net->eval();
  EXPECT_TRUE(torch::equal(net->forward(input), net->forward(input)));
}

// Expected values from PyTorch 1.13.1: torch.manual_seed(0), then the book's
// Net() (layers created in the order conv1, conv2, dropout1, dropout2, fc1,
// fc2); sums in float64.
TEST(ConvNetTest, InitialWeightsEqualPyTorchsForTheSameSeed) {
  torch::manual_seed(0);
  ConvNet net;
  const std::vector<std::pair<std::string, double>> expected_sums = {
      {"conv1.weight", -1.0519974026829004},
      {"conv1.bias", -1.5316754307132214},
      {"conv2.weight", -3.4190548679725907},
      {"conv2.bias", 0.24710378027521074},
      {"fc1.weight", 1.5678153172252145},
      {"fc1.bias", -0.01263911952264607},
      {"fc2.weight", 0.8547817915678024},
      {"fc2.bias", 0.28388896584510803}};
  for (const auto& [name, sum] : expected_sums) {
    const torch::Tensor p = net->named_parameters()[name];
    EXPECT_NEAR(p.to(torch::kFloat64).sum().item<double>(), sum, 1e-9) << name;
  }
  EXPECT_NEAR(net->named_parameters()["fc1.weight"]
                  .to(torch::kFloat64)
                  .pow(2)
                  .sum()
                  .item<double>(),
              21.34757495994048, 1e-9);
}

TEST(ConvNetTest, EvalOutputEqualsPyTorchs) {
  torch::manual_seed(0);
  ConvNet net;
  net->eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor out = net->forward(TestInput(2, 1, 28, 28));
  const torch::Tensor expected =
      torch::tensor(
          {-2.404588460922241,  -2.315364360809326,  -2.262294054031372,
           -2.1682369709014893, -2.270226240158081,  -2.2298333644866943,
           -2.3400235176086426, -2.2752723693847656, -2.406407594680786,
           -2.3815343379974365, -2.3952951431274414, -2.3175485134124756,
           -2.2811808586120605, -2.1783359050750732, -2.2832963466644287,
           -2.210219383239746,  -2.3067479133605957, -2.2958757877349854,
           -2.4270308017730713, -2.356349468231201},
          torch::kFloat32)
          .reshape({2, 10});
  EXPECT_TRUE(torch::allclose(out, expected, /*rtol=*/1e-5, /*atol=*/1e-6))
      << out << "\nexpected\n"
      << expected;
}

TEST(ConvNetTest, BackwardReachesEveryParameter) {
  ConvNet net;
  const torch::Tensor out = net->forward(torch::randn({4, 1, 28, 28}));
  torch::nn::functional::nll_loss(out, torch::tensor({0, 3, 5, 9})).backward();
  for (const auto& item : net->named_parameters()) {
    ASSERT_TRUE(item.value().grad().defined()) << item.key();
    EXPECT_GT(item.value().grad().abs().sum().item<double>(), 0) << item.key();
  }
}

TEST(ConvNetTest, CloneCopiesWeightsAndModeIntoIndependentTensors) {
  ConvNet net;
  net->eval();
  auto copy = std::dynamic_pointer_cast<ConvNetImpl>(net->clone());
  ASSERT_NE(copy, nullptr);
  EXPECT_FALSE(copy->is_training());
  const torch::Tensor input = torch::randn({3, 1, 28, 28});
  EXPECT_TRUE(torch::equal(net->forward(input), copy->forward(input)));
  {
    torch::NoGradGuard no_grad;
    net->named_parameters()["fc2.bias"].add_(1);
  }
  EXPECT_FALSE(torch::equal(net->forward(input), copy->forward(input)));
}

}  // namespace
}  // namespace dtrain::models
