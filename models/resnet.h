// ResNet-18 as torchvision builds it: a 7x7 stride-2 stem with max-pool, four
// stages of two BasicBlocks (64, 128, 256, 512 channels; stride 2 and a 1x1
// projection at the start of stages 2-4), global average pooling and a linear
// classifier. 11,689,512 parameters with 1000 classes, 11,181,642 with 10.
//
// Parameter and buffer names equal torchvision's state_dict keys (conv1,
// bn1, layer1.0.conv1, layer2.0.downsample.0, ..., fc), and so do the
// initialisation (Kaiming normal, fan_out, for convolutions; batch-norm
// weight 1, bias 0; PyTorch's default for fc) and the order in which layers
// draw from the generator: after the same torch::manual_seed, the initial
// weights equal torchvision.models.resnet18()'s.
//
// The output is logits (train with cross-entropy).
//
// Every batch norm is built by ResNet18Options::norm_layer (torchvision's
// norm_layer argument), BatchNorm2d by default; SyncBatchNorm
// (dist/ddp/sync_batch_norm.h) is the other one in use. The structure and the
// names stay the same whichever is chosen.
#ifndef DTRAIN_MODELS_RESNET_H_
#define DTRAIN_MODELS_RESNET_H_

#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/pooling.h>
#include <torch/nn/pimpl.h>

#include <array>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "models/layer_trace.h"
#include "models/model.h"
#include "models/norm_layer.h"

namespace dtrain::models {

struct ResNet18Options {
  int64_t num_classes = 1000;
  int64_t in_channels = 3;
  // A 3x3 stride-1 first convolution and no max-pool, for 28 to 96 pixel
  // inputs (CIFAR, STL-10 at native size): the default stem shrinks a 32 px
  // image to 8 px before the first stage. Not in torchvision; off by default.
  bool small_input_stem = false;
  // torchvision's zero_init_residual: each block's last batch norm starts
  // with weight 0, so that every block starts as the identity.
  bool zero_init_residual = false;
  // Builds each of the 20 batch norms, in torchvision's construction order
  // (norm_layer.h); empty means BatchNorm2d.
  NormLayerFactory norm_layer;
};

// kInvalidArgument naming the field when a value is out of range.
absl::Status Validate(const ResNet18Options& options);

// torchvision's BasicBlock: conv3x3(stride) -> BN -> ReLU -> conv3x3 -> BN,
// plus the input (through `downsample`, a 1x1 convolution and BN, when the
// stride or the channel count changes), then ReLU.
class BasicBlockImpl : public torch::nn::Module {
 public:
  // `norm_layer` must not be empty.
  BasicBlockImpl(int64_t in_planes, int64_t planes, int64_t stride,
                 const NormLayerFactory& norm_layer);

  torch::Tensor forward(const torch::Tensor& input) {
    return Forward(input, nullptr);
  }
  torch::Tensor Forward(const torch::Tensor& input, LayerTrace* trace);

  // The last batch norm, whose weight zero_init_residual sets to 0.
  std::shared_ptr<torch::nn::Module> bn2() const { return bn2_.ptr(); }
  // Null when the block keeps the shape of its input.
  const torch::nn::Sequential& downsample() const { return downsample_; }

 private:
  torch::nn::Conv2d conv1_{nullptr};
  torch::nn::AnyModule bn1_;
  torch::nn::ReLU relu_{nullptr};
  torch::nn::Conv2d conv2_{nullptr};
  torch::nn::AnyModule bn2_;
  torch::nn::Sequential downsample_{nullptr};
};

TORCH_MODULE(BasicBlock);

class ResNet18Impl : public CloneableModel<ResNet18Impl> {
 public:
  static constexpr std::array<int64_t, 4> kBlocksPerStage = {2, 2, 2, 2};
  static constexpr std::array<int64_t, 4> kStageChannels = {64, 128, 256, 512};

  // Throws c10::Error for options Validate rejects.
  explicit ResNet18Impl(const ResNet18Options& options = {});

  // Input [N, in_channels, H, W], any H, W >= 1 (padding carries even 1x1
  // images through every stride, but below 32 px the last stages see 1x1
  // maps, which batch norm cannot normalise in training at batch size 1);
  // output [N, num_classes] logits.
  torch::Tensor Forward(const torch::Tensor& input, LayerTrace* trace) override;

  const ResNet18Options& options() const { return options_; }

  // The classifier (registered as "fc").
  const torch::nn::Linear& fc() const { return fc_; }

 private:
  ResNet18Options options_;
  torch::nn::Conv2d conv1_{nullptr};
  torch::nn::AnyModule bn1_;
  torch::nn::ReLU relu_{nullptr};
  torch::nn::MaxPool2d maxpool_{nullptr};  // null with small_input_stem
  std::array<torch::nn::Sequential, 4> stages_{nullptr, nullptr, nullptr,
                                               nullptr};  // layer1..layer4
  torch::nn::AdaptiveAvgPool2d avgpool_{nullptr};
  torch::nn::Linear fc_{nullptr};
};

TORCH_MODULE(ResNet18);

}  // namespace dtrain::models

#endif  // DTRAIN_MODELS_RESNET_H_
