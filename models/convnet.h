// ConvNet: the book's MNIST network, layer for layer:
//
//   conv1 (1->16, 3x3, stride 1) -> ReLU -> conv2 (16->32, 3x3, stride 1)
//   -> ReLU -> max-pool 2 -> Dropout2d(0.10) -> flatten -> fc1 (4608->64)
//   -> ReLU -> dropout(0.25) -> fc2 (64->10) -> log-softmax
//
// 300,426 parameters with the defaults. The output is log-probabilities
// (train with NLL loss). Parameters are named and created in the order of the
// PyTorch original (conv1, conv2, dropout1, dropout2, fc1, fc2), so after the
// same torch::manual_seed the initial weights equal PyTorch's.
#ifndef DTRAIN_MODELS_CONVNET_H_
#define DTRAIN_MODELS_CONVNET_H_

#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/pooling.h>
#include <torch/nn/pimpl.h>

#include <cstdint>

#include "absl/status/status.h"
#include "models/layer_trace.h"
#include "models/model.h"

namespace dtrain::models {

struct ConvNetOptions {
  int64_t in_channels = 1;
  int64_t num_classes = 10;
  // Side of the square input images. fc1 takes 32 * ((image_size - 4) / 2)^2
  // features: 4608 for 28.
  int64_t image_size = 28;
};

// kInvalidArgument naming the field when a value is out of range.
absl::Status Validate(const ConvNetOptions& options);

class ConvNetImpl : public CloneableModel<ConvNetImpl> {
 public:
  static constexpr double kDropout2dRate = 0.10;
  static constexpr double kDropoutRate = 0.25;

  // Throws c10::Error for options Validate rejects.
  explicit ConvNetImpl(const ConvNetOptions& options = {});

  // Input [N, in_channels, image_size, image_size]; output [N, num_classes]
  // log-probabilities.
  torch::Tensor Forward(const torch::Tensor& input, LayerTrace* trace) override;

  const ConvNetOptions& options() const { return options_; }

 private:
  ConvNetOptions options_;
  torch::nn::Conv2d conv1_{nullptr};
  torch::nn::Conv2d conv2_{nullptr};
  torch::nn::Dropout2d dropout1_{nullptr};
  torch::nn::Dropout dropout2_{nullptr};
  torch::nn::Linear fc1_{nullptr};
  torch::nn::Linear fc2_{nullptr};
  // Parameter-free layers as modules, so that summaries show them.
  torch::nn::ReLU relu_{nullptr};
  torch::nn::MaxPool2d max_pool_{nullptr};
  torch::nn::Flatten flatten_{nullptr};
  torch::nn::LogSoftmax log_softmax_{nullptr};
};

TORCH_MODULE(ConvNet);

}  // namespace dtrain::models

#endif  // DTRAIN_MODELS_CONVNET_H_
