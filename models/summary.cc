#include "models/summary.h"

#include <c10/util/Exception.h>
#include <torch/utils.h>

#include <algorithm>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/tensor_text.h"

namespace dtrain::models {
namespace {

// Restores a module's training mode, submodules included, on scope exit.
class TrainingModeRestorer {
 public:
  explicit TrainingModeRestorer(Model& model) : model_(model) {
    modes_.push_back(model.is_training());
    for (const auto& m : model.modules(/*include_self=*/false)) {
      modes_.push_back(m->is_training());
    }
  }
  ~TrainingModeRestorer() {
    model_.train(modes_[0]);
    size_t i = 1;
    for (const auto& m : model_.modules(/*include_self=*/false)) {
      m->train(modes_[i++]);
    }
  }

 private:
  Model& model_;
  std::vector<bool> modes_;
};

}  // namespace

std::string FormatWithCommas(int64_t value) {
  const bool negative = value < 0;
  // Unsigned negation: -INT64_MIN does not fit in int64_t.
  const uint64_t magnitude = negative ? 0 - static_cast<uint64_t>(value)
                                      : static_cast<uint64_t>(value);
  const std::string digits = std::to_string(magnitude);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return negative ? "-" + out : out;
}

absl::StatusOr<ModelSummary> Summarize(Model& model,
                                       absl::Span<const int64_t> input_shape,
                                       int64_t batch_size) {
  if (batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch size must be positive, got ", batch_size));
  }
  if (input_shape.empty()) {
    return absl::InvalidArgumentError("input shape is empty");
  }
  for (int64_t d : input_shape) {
    if (d < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("input shape ",
                       base::ShapeString(c10::IntArrayRef(input_shape.data(),
                                                          input_shape.size())),
                       " has a dimension that is not positive"));
    }
  }
  ModelSummary summary;
  summary.input_shape.push_back(batch_size);
  summary.input_shape.insert(summary.input_shape.end(), input_shape.begin(),
                             input_shape.end());
  for (const torch::Tensor& p : model.parameters()) {
    summary.total_params += p.numel();
    if (p.requires_grad()) summary.trainable_params += p.numel();
  }
  for (const torch::Tensor& b : model.buffers()) {
    summary.buffer_elements += b.numel();
  }

  torch::TensorOptions options;
  const std::vector<torch::Tensor> params = model.parameters();
  if (!params.empty()) {
    options = options.device(params[0].device()).dtype(params[0].dtype());
  }
  LayerTrace trace;
  try {
    const torch::Tensor input = torch::zeros(summary.input_shape, options);
    TrainingModeRestorer restore(model);
    model.eval();
    torch::NoGradGuard no_grad;
    const int root = trace.Begin("", model);
    const torch::Tensor output = model.Forward(input, &trace);
    trace.End(root, output);
  } catch (const c10::Error& error) {
    return absl::InvalidArgumentError(
        absl::StrCat(ModuleTypeName(model), " cannot take input of shape ",
                     base::ShapeString(summary.input_shape), ": ",
                     error.what_without_backtrace()));
  }
  summary.layers = trace.layers();
  return summary;
}

std::string FormatSummary(const ModelSummary& summary) {
  std::vector<std::string> names;
  std::vector<std::string> shapes;
  size_t name_width = std::string("Layer (type)").size();
  size_t shape_width = std::string("Output shape").size();
  for (const TracedLayer& layer : summary.layers) {
    std::string name = std::string(2 * layer.depth, ' ');
    absl::StrAppend(&name, layer.path.empty() ? layer.type
                                              : absl::StrCat(layer.path, " (",
                                                             layer.type, ")"));
    name_width = std::max(name_width, name.size());
    names.push_back(std::move(name));
    shapes.push_back(base::ShapeString(layer.output_shape));
    shape_width = std::max(shape_width, shapes.back().size());
  }
  const int nw = static_cast<int>(name_width);
  const int sw = static_cast<int>(shape_width);
  const std::string rule(name_width + shape_width + 16, '=');
  std::string out =
      absl::StrCat("Input shape: ", base::ShapeString(summary.input_shape),
                   "\n", rule, "\n");
  absl::StrAppendFormat(&out, "%-*s  %-*s  %12s\n", nw, "Layer (type)", sw,
                        "Output shape", "Param #");
  absl::StrAppend(&out, rule, "\n");
  for (size_t i = 0; i < summary.layers.size(); ++i) {
    const int64_t n = summary.layers[i].num_params;
    absl::StrAppendFormat(&out, "%-*s  %-*s  %12s\n", nw, names[i], sw,
                          shapes[i], n == 0 ? "--" : FormatWithCommas(n));
  }
  absl::StrAppend(&out, rule, "\n");
  absl::StrAppend(&out, "Trainable params: ",
                  FormatWithCommas(summary.trainable_params), "\n");
  absl::StrAppend(
      &out, "Non-trainable params: ",
      FormatWithCommas(summary.total_params - summary.trainable_params), "\n");
  absl::StrAppend(&out, "Buffer elements: ",
                  FormatWithCommas(summary.buffer_elements), "\n");
  absl::StrAppend(
      &out, "Total params: ", FormatWithCommas(summary.total_params), "\n");
  return out;
}

}  // namespace dtrain::models
