#include "models/convnet.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace dtrain::models {
namespace {

constexpr int64_t kConv1Channels = 16;
constexpr int64_t kConv2Channels = 32;
constexpr int64_t kHiddenUnits = 64;
// Two unpadded 3x3 convolutions take 4 pixels off each side length.
constexpr int64_t kMinImageSize = 6;

int64_t Fc1InFeatures(const ConvNetOptions& options) {
  const int64_t side = (options.image_size - 4) / 2;
  return kConv2Channels * side * side;
}

}  // namespace

absl::Status Validate(const ConvNetOptions& options) {
  if (options.in_channels < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ConvNet: in_channels must be positive, got ", options.in_channels));
  }
  if (options.num_classes < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ConvNet: num_classes must be positive, got ", options.num_classes));
  }
  if (options.image_size < kMinImageSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("ConvNet: image_size must be at least ", kMinImageSize,
                     " (two 3x3 convolutions and a 2x2 max-pool), got ",
                     options.image_size));
  }
  return absl::OkStatus();
}

ConvNetImpl::ConvNetImpl(const ConvNetOptions& options)
    : CloneableModel("ConvNet"), options_(options) {
  const absl::Status valid = Validate(options_);
  TORCH_CHECK(valid.ok(), std::string(valid.message()));
  namespace nn = torch::nn;
  // Created in the PyTorch original's order: the random initial weights then
  // come out of the generator in the same order.
  conv1_ = register_module(
      "conv1",
      nn::Conv2d(nn::Conv2dOptions(options_.in_channels, kConv1Channels, 3)
                     .stride(1)));
  conv2_ = register_module(
      "conv2",
      nn::Conv2d(
          nn::Conv2dOptions(kConv1Channels, kConv2Channels, 3).stride(1)));
  dropout1_ = register_module("dropout1", nn::Dropout2d(kDropout2dRate));
  dropout2_ = register_module("dropout2", nn::Dropout(kDropoutRate));
  fc1_ =
      register_module("fc1", nn::Linear(Fc1InFeatures(options_), kHiddenUnits));
  fc2_ = register_module("fc2", nn::Linear(kHiddenUnits, options_.num_classes));
  relu_ = register_module("relu", nn::ReLU());
  max_pool_ = register_module("max_pool", nn::MaxPool2d(2));
  flatten_ = register_module("flatten", nn::Flatten());
  log_softmax_ = register_module("log_softmax", nn::LogSoftmax(1));
}

torch::Tensor ConvNetImpl::Forward(const torch::Tensor& input,
                                   LayerTrace* trace) {
  TORCH_CHECK(input.dim() == 4 && input.size(1) == options_.in_channels &&
                  input.size(2) == options_.image_size &&
                  input.size(3) == options_.image_size,
              "ConvNet expects input of shape [N, ", options_.in_channels, ", ",
              options_.image_size, ", ", options_.image_size, "], got ",
              input.sizes());
  torch::Tensor x = TracedForward(trace, "conv1", conv1_, input);
  x = TracedForward(trace, "relu", relu_, x);
  x = TracedForward(trace, "conv2", conv2_, x);
  x = TracedForward(trace, "relu", relu_, x);
  x = TracedForward(trace, "max_pool", max_pool_, x);
  x = TracedForward(trace, "dropout1", dropout1_, x);
  x = TracedForward(trace, "flatten", flatten_, x);
  x = TracedForward(trace, "fc1", fc1_, x);
  x = TracedForward(trace, "relu", relu_, x);
  x = TracedForward(trace, "dropout2", dropout2_, x);
  x = TracedForward(trace, "fc2", fc2_, x);
  return TracedForward(trace, "log_softmax", log_softmax_, x);
}

}  // namespace dtrain::models
