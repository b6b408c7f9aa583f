#include "models/resnet.h"

#include <torch/nn/init.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/utils.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"

namespace dtrain::models {
namespace {

namespace nn = torch::nn;

nn::Conv2d Conv3x3(int64_t in_planes, int64_t out_planes, int64_t stride) {
  return nn::Conv2d(nn::Conv2dOptions(in_planes, out_planes, 3)
                        .stride(stride)
                        .padding(1)
                        .bias(false));
}

nn::Conv2d Conv1x1(int64_t in_planes, int64_t out_planes, int64_t stride) {
  return nn::Conv2d(
      nn::Conv2dOptions(in_planes, out_planes, 1).stride(stride).bias(false));
}

// Registers a norm layer under `name` and returns it.
nn::AnyModule RegisterNorm(nn::Module& parent, const std::string& name,
                           nn::AnyModule layer) {
  TORCH_CHECK(!layer.is_empty(), "ResNet18: norm_layer built no module for ",
              name);
  parent.register_module(name, layer.ptr());
  return layer;
}

}  // namespace

absl::Status Validate(const ResNet18Options& options) {
  if (options.in_channels < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ResNet18: in_channels must be positive, got ", options.in_channels));
  }
  if (options.num_classes < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ResNet18: num_classes must be positive, got ", options.num_classes));
  }
  return absl::OkStatus();
}

BasicBlockImpl::BasicBlockImpl(int64_t in_planes, int64_t planes,
                               int64_t stride,
                               const NormLayerFactory& norm_layer)
    : torch::nn::Module("BasicBlock") {
  // torchvision builds the projection before the block: same generator order.
  nn::Sequential downsample{nullptr};
  if (stride != 1 || in_planes != planes) {
    downsample = nn::Sequential();
    downsample->push_back(Conv1x1(in_planes, planes, stride));
    downsample->push_back(norm_layer(planes));
  }
  conv1_ = register_module("conv1", Conv3x3(in_planes, planes, stride));
  bn1_ = RegisterNorm(*this, "bn1", norm_layer(planes));
  relu_ = register_module("relu", nn::ReLU(nn::ReLUOptions(/*inplace=*/true)));
  conv2_ = register_module("conv2", Conv3x3(planes, planes, 1));
  bn2_ = RegisterNorm(*this, "bn2", norm_layer(planes));
  if (downsample) downsample_ = register_module("downsample", downsample);
}

torch::Tensor BasicBlockImpl::Forward(const torch::Tensor& input,
                                      LayerTrace* trace) {
  torch::Tensor out = TracedForward(trace, "conv1", conv1_, input);
  out = TracedForward(trace, "bn1", bn1_, out);
  out = TracedForward(trace, "relu", relu_, out);
  out = TracedForward(trace, "conv2", conv2_, out);
  out = TracedForward(trace, "bn2", bn2_, out);
  const torch::Tensor identity =
      downsample_ ? TracedSequential(trace, "downsample", downsample_, input)
                  : input;
  out += identity;
  return TracedForward(trace, "relu", relu_, out);
}

ResNet18Impl::ResNet18Impl(const ResNet18Options& options)
    : CloneableModel("ResNet18"), options_(options) {
  const absl::Status valid = Validate(options_);
  TORCH_CHECK(valid.ok(), std::string(valid.message()));

  int64_t in_planes = kStageChannels[0];
  conv1_ = register_module(
      "conv1",
      options_.small_input_stem
          ? Conv3x3(options_.in_channels, in_planes, 1)
          : nn::Conv2d(nn::Conv2dOptions(options_.in_channels, in_planes, 7)
                           .stride(2)
                           .padding(3)
                           .bias(false)));
  const NormLayerFactory norm_layer =
      options_.norm_layer ? options_.norm_layer : BatchNorm2dLayers();
  bn1_ = RegisterNorm(*this, "bn1", norm_layer(in_planes));
  relu_ = register_module("relu", nn::ReLU(nn::ReLUOptions(/*inplace=*/true)));
  if (!options_.small_input_stem) {
    maxpool_ = register_module(
        "maxpool", nn::MaxPool2d(nn::MaxPool2dOptions(3).stride(2).padding(1)));
  }
  for (size_t s = 0; s < stages_.size(); ++s) {
    const int64_t planes = kStageChannels[s];
    nn::Sequential stage;
    for (int64_t b = 0; b < kBlocksPerStage[s]; ++b) {
      const int64_t stride = (s > 0 && b == 0) ? 2 : 1;
      stage->push_back(BasicBlock(in_planes, planes, stride, norm_layer));
      in_planes = planes;
    }
    stages_[s] = register_module(absl::StrCat("layer", s + 1), stage);
  }
  avgpool_ = register_module("avgpool", nn::AdaptiveAvgPool2d(1));
  fc_ = register_module("fc", nn::Linear(in_planes, options_.num_classes));

  // torchvision's initialisation, in its module order.
  torch::NoGradGuard no_grad;
  for (const std::shared_ptr<nn::Module>& module :
       modules(/*include_self=*/false)) {
    if (auto* conv = module->as<nn::Conv2d>()) {
      nn::init::kaiming_normal_(conv->weight, /*a=*/0, torch::kFanOut,
                                torch::kReLU);
    } else if (auto* bn = module->as<nn::BatchNorm2d>();
               bn != nullptr && bn->options.affine()) {
      nn::init::constant_(bn->weight, 1);
      nn::init::constant_(bn->bias, 0);
    }
  }
  if (options_.zero_init_residual) {
    for (const nn::Sequential& stage : stages_) {
      for (size_t b = 0; b < stage->size(); ++b) {
        // As torchvision: only a norm layer that has a weight.
        const auto params =
            stage->ptr<BasicBlockImpl>(b)->bn2()->named_parameters(false);
        const torch::Tensor* weight = params.find("weight");
        if (weight != nullptr && weight->defined()) nn::init::zeros_(*weight);
      }
    }
  }
}

torch::Tensor ResNet18Impl::Forward(const torch::Tensor& input,
                                    LayerTrace* trace) {
  TORCH_CHECK(input.dim() == 4 && input.size(1) == options_.in_channels,
              "ResNet18 expects input of shape [N, ", options_.in_channels,
              ", H, W], got ", input.sizes());
  torch::Tensor x = TracedForward(trace, "conv1", conv1_, input);
  x = TracedForward(trace, "bn1", bn1_, x);
  x = TracedForward(trace, "relu", relu_, x);
  if (maxpool_) x = TracedForward(trace, "maxpool", maxpool_, x);
  for (size_t s = 0; s < stages_.size(); ++s) {
    nn::Sequential& stage = stages_[s];
    x = TracedNested(trace, absl::StrCat("layer", s + 1), *stage, [&] {
      torch::Tensor y = x;
      for (size_t b = 0; b < stage->size(); ++b) {
        const std::shared_ptr<BasicBlockImpl> block =
            stage->ptr<BasicBlockImpl>(b);
        y = TracedNested(trace, std::to_string(b), *block,
                         [&] { return block->Forward(y, trace); });
      }
      return y;
    });
  }
  x = TracedForward(trace, "avgpool", avgpool_, x);
  x = torch::flatten(x, 1);
  return TracedForward(trace, "fc", fc_, x);
}

}  // namespace dtrain::models
