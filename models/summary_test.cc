#include "models/summary.h"

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/convnet.h"
#include "models/layer_trace.h"
#include "models/resnet.h"

namespace dtrain::models {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const TracedLayer* Find(const ModelSummary& summary, const std::string& path) {
  for (const TracedLayer& layer : summary.layers) {
    if (layer.path == path) return &layer;
  }
  return nullptr;
}

std::string LastLine(const std::string& text) {
  std::vector<std::string> lines =
      absl::StrSplit(text, '\n', absl::SkipEmpty());
  return lines.empty() ? "" : lines.back();
}

TEST(FormatWithCommasTest, GroupsThreeDigits) {
  EXPECT_EQ(FormatWithCommas(0), "0");
  EXPECT_EQ(FormatWithCommas(999), "999");
  EXPECT_EQ(FormatWithCommas(1000), "1,000");
  EXPECT_EQ(FormatWithCommas(300426), "300,426");
  EXPECT_EQ(FormatWithCommas(11689512), "11,689,512");
  EXPECT_EQ(FormatWithCommas(-1234567), "-1,234,567");
  EXPECT_EQ(FormatWithCommas(std::numeric_limits<int64_t>::min()),
            "-9,223,372,036,854,775,808");
}

TEST(SummaryTest, ConvNetLayerByLayer) {
  ConvNet net;
  absl::StatusOr<ModelSummary> summary = Summarize(*net, {1, 28, 28});
  ASSERT_TRUE(summary.ok()) << summary.status();
  std::vector<std::string> rows;
  for (const TracedLayer& layer : summary->layers) {
    rows.push_back(absl::StrCat(layer.path, " ", layer.type, " [",
                                absl::StrJoin(layer.output_shape, ","), "] ",
                                layer.num_params));
  }
  EXPECT_THAT(
      rows,
      ElementsAre(" ConvNet [1,10] 0",  //
                  "conv1 Conv2d [1,16,26,26] 160", "relu ReLU [1,16,26,26] 0",
                  "conv2 Conv2d [1,32,24,24] 4640", "relu ReLU [1,32,24,24] 0",
                  "max_pool MaxPool2d [1,32,12,12] 0",
                  "dropout1 Dropout2d [1,32,12,12] 0",
                  "flatten Flatten [1,4608] 0", "fc1 Linear [1,64] 294976",
                  "relu ReLU [1,64] 0", "dropout2 Dropout [1,64] 0",
                  "fc2 Linear [1,10] 650", "log_softmax LogSoftmax [1,10] 0"));
  EXPECT_EQ(summary->total_params, 300426);
  EXPECT_EQ(summary->trainable_params, 300426);
  EXPECT_THAT(summary->input_shape, ElementsAre(1, 1, 28, 28));
}

TEST(SummaryTest, ResNet18At224Pixels) {
  ResNet18 net;
  absl::StatusOr<ModelSummary> summary = Summarize(*net, {3, 224, 224}, 2);
  ASSERT_TRUE(summary.ok()) << summary.status();
  struct Row {
    std::string path;
    std::string type;
    int depth;
    std::vector<int64_t> shape;
    int64_t params;
  };
  for (const Row& row : std::vector<Row>{
           {"conv1", "Conv2d", 1, {2, 64, 112, 112}, 9408},
           {"maxpool", "MaxPool2d", 1, {2, 64, 56, 56}, 0},
           {"layer1", "Sequential", 1, {2, 64, 56, 56}, 0},
           {"layer1.0", "BasicBlock", 2, {2, 64, 56, 56}, 0},
           {"layer1.0.conv1", "Conv2d", 3, {2, 64, 56, 56}, 36864},
           {"layer2.0.downsample", "Sequential", 3, {2, 128, 28, 28}, 0},
           {"layer2.0.downsample.0", "Conv2d", 4, {2, 128, 28, 28}, 8192},
           {"layer2.0.downsample.1", "BatchNorm2d", 4, {2, 128, 28, 28}, 256},
           {"layer3", "Sequential", 1, {2, 256, 14, 14}, 0},
           {"layer4", "Sequential", 1, {2, 512, 7, 7}, 0},
           {"avgpool", "AdaptiveAvgPool2d", 1, {2, 512, 1, 1}, 0},
           {"fc", "Linear", 1, {2, 1000}, 513000}}) {
    const TracedLayer* layer = Find(*summary, row.path);
    ASSERT_NE(layer, nullptr) << row.path;
    EXPECT_EQ(layer->type, row.type) << row.path;
    EXPECT_EQ(layer->depth, row.depth) << row.path;
    EXPECT_EQ(layer->output_shape, row.shape) << row.path;
    EXPECT_EQ(layer->num_params, row.params) << row.path;
  }
  // Each parameter belongs to exactly one row.
  int64_t sum = 0;
  for (const TracedLayer& layer : summary->layers) sum += layer.num_params;
  EXPECT_EQ(sum, 11689512);
  EXPECT_EQ(summary->total_params, 11689512);
  EXPECT_EQ(summary->buffer_elements, 9620);  // torchvision's, too

  const std::string text = FormatSummary(*summary);
  EXPECT_EQ(LastLine(text), "Total params: 11,689,512");
  EXPECT_THAT(text, HasSubstr("      layer1.0.conv1 (Conv2d)"));
  EXPECT_THAT(text, HasSubstr("[2, 64, 112, 112]"));
  EXPECT_THAT(text, HasSubstr("Trainable params: 11,689,512\n"));
  EXPECT_THAT(text, HasSubstr("Non-trainable params: 0\n"));
}

TEST(SummaryTest, SmallStemHasNoMaxPoolRow) {
  ResNet18Options options;
  options.small_input_stem = true;
  options.num_classes = 10;
  ResNet18 net(options);
  absl::StatusOr<ModelSummary> summary = Summarize(*net, {3, 32, 32});
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(Find(*summary, "maxpool"), nullptr);
  EXPECT_EQ(Find(*summary, "layer1")->output_shape,
            (std::vector<int64_t>{1, 64, 32, 32}));
  EXPECT_EQ(LastLine(FormatSummary(*summary)), "Total params: 11,173,962");
}

TEST(SummaryTest, FrozenParametersAreNotTrainable) {
  ConvNet net;
  for (const torch::Tensor& p : net->named_children()["conv1"]->parameters()) {
    p.set_requires_grad(false);
  }
  absl::StatusOr<ModelSummary> summary = Summarize(*net, {1, 28, 28});
  ASSERT_TRUE(summary.ok());
  EXPECT_EQ(summary->trainable_params, 300426 - 160);
  EXPECT_THAT(FormatSummary(*summary), HasSubstr("Non-trainable params: 160"));
}

TEST(SummaryTest, FeedsTheParametersDtype) {
  ConvNet net;
  net->to(torch::kFloat64);
  absl::StatusOr<ModelSummary> summary = Summarize(*net, {1, 28, 28});
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->total_params, 300426);
}

TEST(SummaryTest, BadShapesAreInvalidArgumentsAndLeaveTheModeAlone) {
  ConvNet net;
  net->train();
  absl::StatusOr<ModelSummary> summary = Summarize(*net, {3, 28, 28});
  EXPECT_EQ(summary.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(summary.status().message()),
              HasSubstr("ConvNet cannot take input of shape [1, 3, 28, 28]: "
                        "ConvNet expects input of shape [N, 1, 28, 28]"));
  EXPECT_THAT(std::string(summary.status().message()),
              ::testing::Not(HasSubstr("frame #")));
  EXPECT_TRUE(net->is_training());

  for (const std::vector<int64_t>& shape :
       std::vector<std::vector<int64_t>>{{}, {1, 0, 28}, {1, -28, 28}}) {
    EXPECT_EQ(Summarize(*net, shape).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(Summarize(*net, {1, 28, 28}, 0).status().code(),
            absl::StatusCode::kInvalidArgument);

  ResNet18 resnet;
  summary = Summarize(*resnet, {1, 64, 64});
  EXPECT_EQ(summary.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(summary.status().message()),
              HasSubstr("ResNet18 cannot take input of shape [1, 1, 64, 64]: "
                        "ResNet18 expects input of shape [N, 3, H, W]"));
  // Padding lets even 1x1 images through every stride.
  EXPECT_TRUE(Summarize(*resnet, {3, 1, 1}).ok());
}

TEST(SummaryTest, ModesAreRestoredPerModule) {
  ResNet18 net;
  net->train();
  net->named_modules()["layer2.0.bn1"]->eval();
  ASSERT_TRUE(Summarize(*net, {3, 32, 32}).ok());
  EXPECT_TRUE(net->is_training());
  EXPECT_TRUE(net->named_modules()["layer2.0.bn2"]->is_training());
  EXPECT_FALSE(net->named_modules()["layer2.0.bn1"]->is_training());
}

TEST(LayerTraceTest, NestsPathsAndDepths) {
  LayerTrace trace;
  ConvNet net;
  const int root = trace.Begin("", *net);
  const int child = trace.Begin("block", *net);
  const int leaf = trace.Begin("0", *net->named_children()["conv1"]);
  trace.End(leaf, torch::zeros({1, 2}));
  trace.End(child, torch::zeros({1, 3}));
  trace.End(root, torch::zeros({4}));
  ASSERT_EQ(trace.layers().size(), 3u);
  EXPECT_EQ(trace.layers()[0].path, "");
  EXPECT_EQ(trace.layers()[1].path, "block");
  EXPECT_EQ(trace.layers()[2].path, "block.0");
  EXPECT_EQ(trace.layers()[2].type, "Conv2d");
  EXPECT_EQ(trace.layers()[2].depth, 2);
  EXPECT_EQ(trace.layers()[2].num_params, 160);
  EXPECT_THAT(trace.layers()[1].output_shape, ElementsAre(1, 3));
  EXPECT_THROW(trace.End(root, torch::zeros({1})), c10::Error);
}

}  // namespace
}  // namespace dtrain::models
