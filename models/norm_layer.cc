#include "models/norm_layer.h"

#include <torch/nn/modules/batchnorm.h>

namespace dtrain::models {

NormLayerFactory BatchNorm2dLayers() {
  return [](int64_t num_features) {
    return torch::nn::AnyModule(torch::nn::BatchNorm2d(num_features));
  };
}

}  // namespace dtrain::models
