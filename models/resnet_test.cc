#include "models/resnet.h"

#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/utils.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/layer_trace.h"

namespace dtrain::models {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using Shape = std::pair<std::string, std::vector<int64_t>>;

// Deterministic input, the same in the Python reference: sin(0.37 * i).
torch::Tensor TestInput(int64_t n, int64_t c, int64_t h, int64_t w) {
  return torch::arange(n * c * h * w, torch::kFloat32)
      .mul(0.37)
      .sin()
      .reshape({n, c, h, w});
}

template <typename Dict>
std::vector<Shape> Shapes(const Dict& dict) {
  std::vector<Shape> out;
  for (const auto& item : dict) {
    out.emplace_back(item.key(), item.value().sizes().vec());
  }
  return out;
}

ResNet18Options Options(int64_t num_classes, bool small_input_stem = false,
                        int64_t in_channels = 3) {
  ResNet18Options options;
  options.num_classes = num_classes;
  options.small_input_stem = small_input_stem;
  options.in_channels = in_channels;
  return options;
}

// Counts from torchvision 0.14.1: resnet18(num_classes=...), with conv1
// replaced by a 3x3 stride-1 convolution for the small stem.
TEST(ResNet18Test, HasTorchvisionsParameterCounts) {
  EXPECT_EQ(NumParameters(*ResNet18()), 11689512);
  EXPECT_EQ(NumParameters(*ResNet18(Options(10))), 11181642);
  EXPECT_EQ(NumParameters(*ResNet18(Options(1000, true))), 11681832);
  EXPECT_EQ(NumParameters(*ResNet18(Options(10, true))), 11173962);
  EXPECT_EQ(NumParameters(*ResNet18(Options(10, false, 1))), 11175370);
}

// torchvision.models.resnet18(): named_parameters() and named_buffers(), which
// together are its state_dict keys.
TEST(ResNet18Test, NamesAndShapesEqualTorchvisionsStateDict) {
  ResNet18 net;
  const std::vector<Shape> expected_params = {
      {"conv1.weight", {64, 3, 7, 7}},
      {"bn1.weight", {64}},
      {"bn1.bias", {64}},
      {"layer1.0.conv1.weight", {64, 64, 3, 3}},
      {"layer1.0.bn1.weight", {64}},
      {"layer1.0.bn1.bias", {64}},
      {"layer1.0.conv2.weight", {64, 64, 3, 3}},
      {"layer1.0.bn2.weight", {64}},
      {"layer1.0.bn2.bias", {64}},
      {"layer1.1.conv1.weight", {64, 64, 3, 3}},
      {"layer1.1.bn1.weight", {64}},
      {"layer1.1.bn1.bias", {64}},
      {"layer1.1.conv2.weight", {64, 64, 3, 3}},
      {"layer1.1.bn2.weight", {64}},
      {"layer1.1.bn2.bias", {64}},
      {"layer2.0.conv1.weight", {128, 64, 3, 3}},
      {"layer2.0.bn1.weight", {128}},
      {"layer2.0.bn1.bias", {128}},
      {"layer2.0.conv2.weight", {128, 128, 3, 3}},
      {"layer2.0.bn2.weight", {128}},
      {"layer2.0.bn2.bias", {128}},
      {"layer2.0.downsample.0.weight", {128, 64, 1, 1}},
      {"layer2.0.downsample.1.weight", {128}},
      {"layer2.0.downsample.1.bias", {128}},
      {"layer2.1.conv1.weight", {128, 128, 3, 3}},
      {"layer2.1.bn1.weight", {128}},
      {"layer2.1.bn1.bias", {128}},
      {"layer2.1.conv2.weight", {128, 128, 3, 3}},
      {"layer2.1.bn2.weight", {128}},
      {"layer2.1.bn2.bias", {128}},
      {"layer3.0.conv1.weight", {256, 128, 3, 3}},
      {"layer3.0.bn1.weight", {256}},
      {"layer3.0.bn1.bias", {256}},
      {"layer3.0.conv2.weight", {256, 256, 3, 3}},
      {"layer3.0.bn2.weight", {256}},
      {"layer3.0.bn2.bias", {256}},
      {"layer3.0.downsample.0.weight", {256, 128, 1, 1}},
      {"layer3.0.downsample.1.weight", {256}},
      {"layer3.0.downsample.1.bias", {256}},
      {"layer3.1.conv1.weight", {256, 256, 3, 3}},
      {"layer3.1.bn1.weight", {256}},
      {"layer3.1.bn1.bias", {256}},
      {"layer3.1.conv2.weight", {256, 256, 3, 3}},
      {"layer3.1.bn2.weight", {256}},
      {"layer3.1.bn2.bias", {256}},
      {"layer4.0.conv1.weight", {512, 256, 3, 3}},
      {"layer4.0.bn1.weight", {512}},
      {"layer4.0.bn1.bias", {512}},
      {"layer4.0.conv2.weight", {512, 512, 3, 3}},
      {"layer4.0.bn2.weight", {512}},
      {"layer4.0.bn2.bias", {512}},
      {"layer4.0.downsample.0.weight", {512, 256, 1, 1}},
      {"layer4.0.downsample.1.weight", {512}},
      {"layer4.0.downsample.1.bias", {512}},
      {"layer4.1.conv1.weight", {512, 512, 3, 3}},
      {"layer4.1.bn1.weight", {512}},
      {"layer4.1.bn1.bias", {512}},
      {"layer4.1.conv2.weight", {512, 512, 3, 3}},
      {"layer4.1.bn2.weight", {512}},
      {"layer4.1.bn2.bias", {512}},
      {"fc.weight", {1000, 512}},
      {"fc.bias", {1000}},
  };
  const std::vector<Shape> expected_buffers = {
      {"bn1.running_mean", {64}},
      {"bn1.running_var", {64}},
      {"bn1.num_batches_tracked", {}},
      {"layer1.0.bn1.running_mean", {64}},
      {"layer1.0.bn1.running_var", {64}},
      {"layer1.0.bn1.num_batches_tracked", {}},
      {"layer1.0.bn2.running_mean", {64}},
      {"layer1.0.bn2.running_var", {64}},
      {"layer1.0.bn2.num_batches_tracked", {}},
      {"layer1.1.bn1.running_mean", {64}},
      {"layer1.1.bn1.running_var", {64}},
      {"layer1.1.bn1.num_batches_tracked", {}},
      {"layer1.1.bn2.running_mean", {64}},
      {"layer1.1.bn2.running_var", {64}},
      {"layer1.1.bn2.num_batches_tracked", {}},
      {"layer2.0.bn1.running_mean", {128}},
      {"layer2.0.bn1.running_var", {128}},
      {"layer2.0.bn1.num_batches_tracked", {}},
      {"layer2.0.bn2.running_mean", {128}},
      {"layer2.0.bn2.running_var", {128}},
      {"layer2.0.bn2.num_batches_tracked", {}},
      {"layer2.0.downsample.1.running_mean", {128}},
      {"layer2.0.downsample.1.running_var", {128}},
      {"layer2.0.downsample.1.num_batches_tracked", {}},
      {"layer2.1.bn1.running_mean", {128}},
      {"layer2.1.bn1.running_var", {128}},
      {"layer2.1.bn1.num_batches_tracked", {}},
      {"layer2.1.bn2.running_mean", {128}},
      {"layer2.1.bn2.running_var", {128}},
      {"layer2.1.bn2.num_batches_tracked", {}},
      {"layer3.0.bn1.running_mean", {256}},
      {"layer3.0.bn1.running_var", {256}},
      {"layer3.0.bn1.num_batches_tracked", {}},
      {"layer3.0.bn2.running_mean", {256}},
      {"layer3.0.bn2.running_var", {256}},
      {"layer3.0.bn2.num_batches_tracked", {}},
      {"layer3.0.downsample.1.running_mean", {256}},
      {"layer3.0.downsample.1.running_var", {256}},
      {"layer3.0.downsample.1.num_batches_tracked", {}},
      {"layer3.1.bn1.running_mean", {256}},
      {"layer3.1.bn1.running_var", {256}},
      {"layer3.1.bn1.num_batches_tracked", {}},
      {"layer3.1.bn2.running_mean", {256}},
      {"layer3.1.bn2.running_var", {256}},
      {"layer3.1.bn2.num_batches_tracked", {}},
      {"layer4.0.bn1.running_mean", {512}},
      {"layer4.0.bn1.running_var", {512}},
      {"layer4.0.bn1.num_batches_tracked", {}},
      {"layer4.0.bn2.running_mean", {512}},
      {"layer4.0.bn2.running_var", {512}},
      {"layer4.0.bn2.num_batches_tracked", {}},
      {"layer4.0.downsample.1.running_mean", {512}},
      {"layer4.0.downsample.1.running_var", {512}},
      {"layer4.0.downsample.1.num_batches_tracked", {}},
      {"layer4.1.bn1.running_mean", {512}},
      {"layer4.1.bn1.running_var", {512}},
      {"layer4.1.bn1.num_batches_tracked", {}},
      {"layer4.1.bn2.running_mean", {512}},
      {"layer4.1.bn2.running_var", {512}},
      {"layer4.1.bn2.num_batches_tracked", {}},
  };
  EXPECT_THAT(Shapes(net->named_parameters()),
              ElementsAreArray(expected_params));
  EXPECT_THAT(Shapes(net->named_buffers()), ElementsAreArray(expected_buffers));
}

// Stage outputs for each input size, as torchvision computes them.
TEST(ResNet18Test, OutputShapesForEachInputSize) {
  struct Case {
    int64_t size;
    bool small_stem;
    std::vector<int64_t> stem;    // after conv1 (and max-pool)
    std::vector<int64_t> layer4;  // before average pooling
  };
  const std::vector<Case> cases = {
      {32, false, {2, 64, 8, 8}, {2, 512, 1, 1}},
      {96, false, {2, 64, 24, 24}, {2, 512, 3, 3}},
      {224, false, {2, 64, 56, 56}, {2, 512, 7, 7}},
      {28, true, {2, 64, 28, 28}, {2, 512, 4, 4}},
      {32, true, {2, 64, 32, 32}, {2, 512, 4, 4}},
      {96, true, {2, 64, 96, 96}, {2, 512, 12, 12}},
  };
  for (const Case& c : cases) {
    ResNet18 net(Options(10, c.small_stem));
    net->eval();
    torch::NoGradGuard no_grad;
    LayerTrace trace;
    const torch::Tensor out =
        net->Forward(torch::randn({2, 3, c.size, c.size}), &trace);
    EXPECT_THAT(out.sizes().vec(), ElementsAre(2, 10));
    std::vector<int64_t> stem, layer4;
    for (const TracedLayer& layer : trace.layers()) {
      if (layer.path == (c.small_stem ? "relu" : "maxpool") && stem.empty()) {
        stem = layer.output_shape;
      }
      if (layer.path == "layer4") layer4 = layer.output_shape;
    }
    EXPECT_EQ(stem, c.stem) << c.size << (c.small_stem ? " small stem" : "");
    EXPECT_EQ(layer4, c.layer4)
        << c.size << (c.small_stem ? " small stem" : "");
  }
}

TEST(ResNet18Test, SmallStemIsA3x3Stride1ConvolutionWithoutMaxPool) {
  ResNet18 net(Options(10, true));
  EXPECT_THAT(net->named_parameters()["conv1.weight"].sizes().vec(),
              ElementsAre(64, 3, 3, 3));
  for (const auto& item : net->named_children()) {
    EXPECT_NE(item.key(), "maxpool");
  }
  ResNet18 standard;
  bool has_maxpool = false;
  for (const auto& item : standard->named_children()) {
    has_maxpool |= item.key() == "maxpool";
  }
  EXPECT_TRUE(has_maxpool);
}

TEST(ResNet18Test, InputChannelsAreConfigurable) {
  ResNet18 net(Options(10, false, 1));
  net->eval();
  EXPECT_THAT(net->forward(torch::randn({2, 1, 64, 64})).sizes().vec(),
              ElementsAre(2, 10));
  try {
    net->forward(torch::randn({2, 3, 64, 64}));
    ADD_FAILURE() << "no error for 3 channels";
  } catch (const c10::Error& e) {
    EXPECT_THAT(e.what_without_backtrace(),
                HasSubstr("ResNet18 expects input of shape [N, 1, H, W]"));
  }
}

TEST(ResNet18Test, ValidateNamesTheBadField) {
  EXPECT_TRUE(Validate(ResNet18Options()).ok());
  EXPECT_THAT(std::string(Validate(Options(0)).message()),
              HasSubstr("num_classes must be positive"));
  EXPECT_THAT(std::string(Validate(Options(10, false, 0)).message()),
              HasSubstr("in_channels must be positive"));
  EXPECT_THROW(ResNet18{Options(-3)}, c10::Error);
}

// torchvision's init: Kaiming normal with fan_out for every convolution, so
// std = sqrt(2 / (out_channels * kh * kw)); batch norm weight 1, bias 0.
// LibTorch's default (Kaiming uniform, a = sqrt(5), fan_in) would give a std
// of 1 / sqrt(3 * fan_in): for layer4's convolutions 0.0085 instead of 0.0208.
TEST(ResNet18Test, InitialisesLikeTorchvision) {
  torch::manual_seed(1);
  ResNet18 net;
  for (const auto& item : net->named_parameters()) {
    const std::string& name = item.key();
    const torch::Tensor& p = item.value();
    if (p.dim() == 4) {
      const double fan_out = p.size(0) * p.size(2) * p.size(3);
      const double expected_std = std::sqrt(2.0 / fan_out);
      // Relative error of a sample std: about 1 / sqrt(2 n); n >= 8192 here.
      EXPECT_NEAR(p.std().item<double>() / expected_std, 1.0, 0.03) << name;
      EXPECT_NEAR(p.mean().item<double>() / expected_std, 0.0, 0.05) << name;
    } else if (name.find("bn") != std::string::npos ||
               name.find("downsample.1") != std::string::npos) {
      const double value = name.find("weight") != std::string::npos ? 1 : 0;
      EXPECT_TRUE(torch::equal(p, torch::full_like(p, value))) << name;
    }
  }
  // fc keeps PyTorch's Linear default: uniform within 1 / sqrt(512).
  const torch::Tensor fc = net->fc()->weight;
  EXPECT_LE(fc.abs().max().item<double>(), 1 / std::sqrt(512.0));
  EXPECT_GT(fc.abs().max().item<double>(), 0.95 / std::sqrt(512.0));
  for (const auto& item : net->named_buffers()) {
    if (item.key().find("running_var") != std::string::npos) {
      EXPECT_TRUE(torch::equal(item.value(), torch::ones_like(item.value())));
    }
  }
}

TEST(ResNet18Test, ZeroInitResidualZeroesEachBlocksLastBatchNorm) {
  ResNet18Options options;
  options.zero_init_residual = true;
  ResNet18 net(options);
  int zeroed = 0;
  for (const auto& item : net->named_parameters()) {
    const std::string& name = item.key();
    if (name.find("bn2.weight") != std::string::npos) {
      EXPECT_TRUE(torch::equal(item.value(), torch::zeros_like(item.value())))
          << name;
      ++zeroed;
    } else if (name.find("bn1.weight") != std::string::npos) {
      EXPECT_TRUE(torch::equal(item.value(), torch::ones_like(item.value())))
          << name;
    }
  }
  EXPECT_EQ(zeroed, 8);
}

// torchvision's norm_layer: the factory builds all 20 batch norms, in
// construction order, and the names, shapes, initial weights and outputs
// stay those of the default model.
TEST(ResNet18Test, NormLayerBuildsEveryBatchNormAndKeepsTheModel) {
  std::vector<int64_t> built;
  ResNet18Options options = Options(10, true);
  options.zero_init_residual = true;
  options.norm_layer = [&built](int64_t channels) {
    built.push_back(channels);
    return torch::nn::AnyModule(torch::nn::BatchNorm2d(
        torch::nn::BatchNorm2dOptions(channels).momentum(0.3)));
  };
  torch::manual_seed(4);
  ResNet18 custom(options);
  options.norm_layer = nullptr;
  torch::manual_seed(4);
  ResNet18 standard(options);
  EXPECT_THAT(built,
              ElementsAre(64, 64, 64, 64, 64, 128, 128, 128, 128, 128, 256, 256,
                          256, 256, 256, 512, 512, 512, 512, 512));
  EXPECT_EQ(Shapes(custom->named_parameters()),
            Shapes(standard->named_parameters()));
  EXPECT_EQ(Shapes(custom->named_buffers()), Shapes(standard->named_buffers()));
  const auto expected = standard->named_parameters();
  for (const auto& item : custom->named_parameters()) {
    EXPECT_TRUE(torch::equal(item.value(), expected[item.key()])) << item.key();
  }
  // The custom layers run: with momentum 0.3, not 0.1, the statistics move
  // further in one training forward.
  const torch::Tensor x = TestInput(4, 3, 8, 8);
  EXPECT_TRUE(
      torch::allclose(custom->forward(x), standard->forward(x), 1e-5, 1e-5));
  const torch::Tensor moved = custom->named_buffers()["bn1.running_var"] - 1;
  const torch::Tensor moved_default =
      standard->named_buffers()["bn1.running_var"] - 1;
  EXPECT_TRUE(torch::allclose(moved, moved_default * 3, 1e-4, 1e-6));
}

// Expected values from torchvision 0.14.1: torch.manual_seed(0), then
// resnet18(); sums and sums of squares in float64. Equal values mean the same
// layers draw from the generator in the same order with the same init.
TEST(ResNet18Test, InitialWeightsEqualTorchvisionsForTheSameSeed) {
  torch::manual_seed(0);
  ResNet18 net;
  struct Expected {
    std::string name;
    double sum;
    double sum_of_squares;
  };
  const std::vector<Expected> expected = {
      {"conv1.weight", -5.018750041808971, 5.94274807032385},
      {"bn1.weight", 64.0, 64.0},
      {"layer1.0.conv1.weight", -1.89275079272511, 126.43032058066557},
      {"layer2.0.downsample.0.weight", 12.327413307634743, 128.53564646234597},
      {"layer4.1.conv2.weight", 13.657922713767139, 1023.2808146730622},
      {"fc.weight", 22.258755403208127, 333.0089072547345},
      {"fc.bias", -0.2986611974411062, 0.6359364495192156},
  };
  for (const Expected& e : expected) {
    const torch::Tensor p = net->named_parameters()[e.name].to(torch::kFloat64);
    EXPECT_NEAR(p.sum().item<double>(), e.sum, 1e-8) << e.name;
    EXPECT_NEAR(p.pow(2).sum().item<double>(), e.sum_of_squares, 1e-8)
        << e.name;
  }
}

TEST(ResNet18Test, EvalOutputEqualsTorchvisions) {
  torch::manual_seed(0);
  ResNet18 net(Options(10));
  net->eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor out = net->forward(TestInput(2, 3, 32, 32));
  const torch::Tensor expected =
      torch::tensor(
          {0.030526679009199142, -0.01877846010029316,  -0.23965126276016235,
           0.08206193149089813,  -0.46888434886932373,  -0.40643396973609924,
           0.00943592470139265,  0.060822781175374985,  0.13436290621757507,
           0.1795625388622284,   0.04484277591109276,   -0.02184336818754673,
           -0.26752060651779175, 0.01994163915514946,   -0.4411298334598541,
           -0.3938009440898895,  -0.017352193593978882, 0.012799043208360672,
           0.166362926363945,    0.1779332458972931},
          torch::kFloat32)
          .reshape({2, 10});
  EXPECT_TRUE(torch::allclose(out, expected, /*rtol=*/1e-4, /*atol=*/1e-5))
      << out << "\nexpected\n"
      << expected;
}

TEST(ResNet18Test, SameSeedGivesSameOutputsInTraining) {
  const torch::Tensor input = TestInput(4, 3, 32, 32);
  auto run = [&](uint64_t seed) {
    torch::manual_seed(seed);
    ResNet18 net(Options(10));
    return net->forward(input);
  };
  const torch::Tensor a = run(3);
  EXPECT_TRUE(torch::equal(a, run(3)));
  EXPECT_FALSE(torch::allclose(a, run(4)));
}

TEST(ResNet18Test, TrainingStepUpdatesGradientsAndBatchNormStatistics) {
  ResNet18 net(Options(10));
  const torch::Tensor out = net->forward(torch::randn({4, 3, 32, 32}));
  torch::nn::functional::cross_entropy(out, torch::tensor({1, 2, 3, 4}))
      .backward();
  int with_grad = 0;
  for (const torch::Tensor& p : net->parameters()) {
    with_grad += p.grad().defined() && p.grad().abs().sum().item<double>() > 0;
  }
  EXPECT_EQ(with_grad, 62);
  const torch::Tensor tracked = net->named_buffers()["bn1.num_batches_tracked"];
  EXPECT_EQ(tracked.item<int64_t>(), 1);
  const torch::Tensor mean = net->named_buffers()["layer3.1.bn2.running_mean"];
  EXPECT_FALSE(torch::equal(mean, torch::zeros_like(mean)));
}

TEST(ResNet18Test, CloneKeepsWeightsBuffersAndOutputs) {
  ResNet18 net(Options(10, true));
  net->forward(torch::randn({4, 3, 32, 32}));  // moves the BN statistics
  net->eval();
  auto copy = std::dynamic_pointer_cast<ResNet18Impl>(net->clone());
  ASSERT_NE(copy, nullptr);
  EXPECT_TRUE(copy->options().small_input_stem);
  EXPECT_FALSE(copy->is_training());
  const torch::Tensor input = torch::randn({2, 3, 32, 32});
  EXPECT_TRUE(torch::equal(net->forward(input), copy->forward(input)));
}

}  // namespace
}  // namespace dtrain::models
