// A model summary like torchinfo's: one forward pass on a zero batch records
// each layer's output shape and parameter count, then FormatSummary prints
// them as a table that ends with the line "Total params: 11,689,512".
#ifndef DTRAIN_MODELS_SUMMARY_H_
#define DTRAIN_MODELS_SUMMARY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "models/layer_trace.h"
#include "models/model.h"

namespace dtrain::models {

struct ModelSummary {
  std::vector<int64_t> input_shape;  // with the batch dimension
  // Pre-order; layers[0] is the model itself.
  std::vector<TracedLayer> layers;
  int64_t total_params = 0;
  int64_t trainable_params = 0;
  int64_t buffer_elements = 0;  // batch-norm statistics and the like
};

// Runs `model` once, in eval mode and without autograd, on zeros of shape
// [batch_size, input_shape...] with the device and dtype of its parameters,
// then restores its training mode. kInvalidArgument when the shape is
// malformed or the model rejects it (the message is LibTorch's, without its
// backtrace).
absl::StatusOr<ModelSummary> Summarize(Model& model,
                                       absl::Span<const int64_t> input_shape,
                                       int64_t batch_size = 1);

// The table: one row per layer, indented by depth, with its path and type,
// output shape and own parameters ("--" for none), then totals. The last line
// is "Total params: N" with N in groups of three digits.
std::string FormatSummary(const ModelSummary& summary);

// 11689512 -> "11,689,512".
std::string FormatWithCommas(int64_t value);

}  // namespace dtrain::models

#endif  // DTRAIN_MODELS_SUMMARY_H_
