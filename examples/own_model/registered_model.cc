// A model of one's own for //trainer:train's --model flag: the two-layer
// perceptron of train_own_model.cc as a models::Model, registered as "mlp".
// A binary that links this library (alwayslink, see BUILD) and
// //trainer:train_main is `train` with one more model:
//
//   train_with_own_model --model=mlp --nproc_per_node=2
//
// with every flag of train: checkpoints and resume, --metrics_json,
// --save_state_dict (names fc1.weight, fc1.bias, fc2.weight, fc2.bias).
#include <c10/util/Exception.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "models/layer_trace.h"
#include "models/model.h"
#include "models/registry.h"

namespace dtrain::examples {
namespace {

constexpr int64_t kHiddenUnits = 128;

// Input [N, C, H, W] -> flatten -> fc1 -> ReLU -> fc2 -> [N, classes] logits.
class Mlp : public models::Model {
 public:
  Mlp(int64_t in_features, int64_t num_classes)
      : Model("Mlp"), in_features_(in_features) {
    // Layers with parameters come first, in the order a PyTorch module with
    // self.fc1 and self.fc2 creates them: that order decides which random
    // numbers each layer's initial weights take.
    fc1_ = register_module("fc1", torch::nn::Linear(in_features, kHiddenUnits));
    fc2_ = register_module("fc2", torch::nn::Linear(kHiddenUnits, num_classes));
    flatten_ = register_module("flatten", torch::nn::Flatten());
    relu_ = register_module("relu", torch::nn::ReLU());
  }

  // Reports each layer to `trace` for model summaries.
  torch::Tensor Forward(const torch::Tensor& input,
                        models::LayerTrace* trace) override {
    TORCH_CHECK(input.dim() >= 2 && input[0].numel() == in_features_,
                "mlp expects input of ", in_features_,
                " values per example, got shape ", input.sizes());
    torch::Tensor x = models::TracedForward(trace, "flatten", flatten_, input);
    x = models::TracedForward(trace, "fc1", fc1_, x);
    x = models::TracedForward(trace, "relu", relu_, x);
    return models::TracedForward(trace, "fc2", fc2_, x);
  }

 private:
  int64_t in_features_;
  torch::nn::Linear fc1_{nullptr};
  torch::nn::Linear fc2_{nullptr};
  torch::nn::Flatten flatten_{nullptr};
  torch::nn::ReLU relu_{nullptr};
};

// The registry sets every size (the model's defaults for those the caller
// left unset); options the model does not have are refused.
absl::StatusOr<std::shared_ptr<models::Model>> CreateMlp(
    const models::ModelConfig& config) {
  if (config.small_input_stem) {
    return absl::InvalidArgumentError(
        "mlp has no small_input_stem option (only resnet18 has)");
  }
  const int64_t in_features =
      *config.in_channels * *config.image_size * *config.image_size;
  return std::shared_ptr<models::Model>(
      std::make_shared<Mlp>(in_features, *config.num_classes));
}

// Registered while the program starts; a name already taken stops it with
// the reason.
const models::ModelRegistration kMlpRegistration(
    {"mlp",
     "two linear layers (128 hidden units) over the flattened image",
     10,
     {1, 28, 28}},
    &CreateMlp);

}  // namespace
}  // namespace dtrain::examples
