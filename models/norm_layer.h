// The normalisation layer a model is built with, chosen by the caller as
// torchvision's `norm_layer` argument: a factory from the number of channels
// to a module. A model holds each such layer as a torch::nn::AnyModule and
// registers it under its usual name ("bn1"), so parameter and buffer names
// depend only on what the layer itself registers.
//
// The layer's contract: a forward(const Tensor&) -> Tensor that keeps the
// input's shape ([N, C, ...] with C = num_features); BatchNorm2d's parameter
// and buffer names (weight, bias, running_mean, running_var,
// num_batches_tracked) if checkpoints and PyTorch state_dicts are to stay
// interchangeable with the default; weight 1 and bias 0 at construction
// (models initialise BatchNorm2d that way and leave other layers as built).
//
// LibTorch's Module::replace_module swaps the registry entry but not the
// member a parent's forward calls, which is why the layer is chosen at
// construction instead of converted afterwards.
#ifndef DTRAIN_MODELS_NORM_LAYER_H_
#define DTRAIN_MODELS_NORM_LAYER_H_

#include <torch/nn/modules/container/any.h>

#include <cstdint>
#include <functional>

#include "models/model_catalog.h"

namespace dtrain::models {

// Called once per layer, in the order the model builds its layers, on the
// constructing thread.
// (NormLayerFactory itself is declared in model_catalog.h, so that
// ModelConfig can hold one without LibTorch's headers.)

// torch::nn::BatchNorm2d with default options: the default everywhere.
NormLayerFactory BatchNorm2dLayers();

}  // namespace dtrain::models

#endif  // DTRAIN_MODELS_NORM_LAYER_H_
