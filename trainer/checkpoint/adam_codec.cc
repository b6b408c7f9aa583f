// torch::optim::Adam and AdamW in checkpoints: options lr, beta1, beta2, eps,
// weight_decay (float64) and amsgrad (bool), restored on load; per parameter
// the step (int64), exp_avg, exp_avg_sq and, with amsgrad, max_exp_avg_sq
// (after a byte saying whether it is there). One template for both: their
// options and state have the same fields.
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>

#include <cmath>
#include <memory>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "base/byte_codec.h"
#include "base/status_macros.h"
#include "trainer/checkpoint/optimizer_codec.h"
#include "trainer/checkpoint/tensor_codec.h"

namespace dtrain::trainer::internal {
namespace {

template <typename Optimizer, typename Options, typename ParamState>
class AdamFamily final : public OptimizerCodec {
 public:
  AdamFamily(uint8_t kind, absl::string_view name, absl::string_view type_name)
      : kind_(kind), name_(name), type_name_(type_name) {}

  uint8_t kind() const override { return kind_; }
  absl::string_view name() const override { return name_; }
  absl::string_view type_name() const override { return type_name_; }
  bool Handles(const torch::optim::Optimizer& optimizer) const override {
    return dynamic_cast<const Optimizer*>(&optimizer) != nullptr;
  }
  size_t min_options_size() const override { return 5 * 8 + 1; }
  bool RestoresOptions() const override { return true; }

  absl::Status WriteOptions(const torch::optim::OptimizerOptions& options,
                            size_t group, base::ByteWriter& w) const override {
    const auto* adam = dynamic_cast<const Options*>(&options);
    if (adam == nullptr) {
      return w.Error(absl::StrCat("optimizer group ", group, " does not have ",
                                  name_, " options"));
    }
    w.F64(adam->lr())
        .F64(std::get<0>(adam->betas()))
        .F64(std::get<1>(adam->betas()));
    w.F64(adam->eps()).F64(adam->weight_decay()).Bool(adam->amsgrad());
    return absl::OkStatus();
  }

  absl::Status ReadOptions(base::ByteReader& r, absl::string_view where,
                           SavedGroup* out) const override {
    const std::string what = absl::StrCat("options of ", where);
    double v[5];  // lr, beta1, beta2, eps, weight_decay
    for (double& value : v) DTRAIN_RETURN_IF_ERROR(r.F64(what, &value));
    bool amsgrad = false;
    DTRAIN_RETURN_IF_ERROR(r.Bool(what, &amsgrad));
    // PyTorch's own checks on Adam's arguments.
    if (!(v[0] >= 0) || !(v[3] >= 0) || !(v[4] >= 0) || !(v[1] >= 0) ||
        !(v[1] < 1) || !(v[2] >= 0) || !(v[2] < 1) || !std::isfinite(v[0]) ||
        !std::isfinite(v[3]) || !std::isfinite(v[4])) {
      return Malformed(absl::StrCat(
          where, ": ", name_, " options out of range (lr ", v[0], ", betas (",
          v[1], ", ", v[2], "), eps ", v[3], ", weight_decay ", v[4], ")"));
    }
    auto options = std::make_unique<Options>(v[0]);
    options->betas(std::make_tuple(v[1], v[2]))
        .eps(v[3])
        .weight_decay(v[4])
        .amsgrad(amsgrad);
    out->options = std::move(options);
    return absl::OkStatus();
  }

  absl::Status WriteState(const torch::optim::OptimizerParamState* state,
                          absl::string_view what,
                          base::ByteWriter& w) const override {
    const auto* adam = dynamic_cast<const ParamState*>(state);
    if (state != nullptr && adam == nullptr) {
      return w.Error(absl::StrCat(what, " has no ", name_, " state"));
    }
    w.Bool(adam != nullptr);
    if (adam == nullptr) return absl::OkStatus();
    w.I64(adam->step());
    DTRAIN_RETURN_IF_ERROR(
        WriteTensor(adam->exp_avg(), absl::StrCat(what, " exp_avg"), w));
    DTRAIN_RETURN_IF_ERROR(
        WriteTensor(adam->exp_avg_sq(), absl::StrCat(what, " exp_avg_sq"), w));
    const bool has_max = adam->max_exp_avg_sq().defined();
    w.Bool(has_max);
    if (!has_max) return absl::OkStatus();
    return WriteTensor(adam->max_exp_avg_sq(),
                       absl::StrCat(what, " max_exp_avg_sq"), w);
  }

  absl::Status ReadState(base::ByteReader& r, absl::string_view what,
                         SavedParamState* out) const override {
    DTRAIN_RETURN_IF_ERROR(
        r.Bool(absl::StrCat("has-state byte of ", what), &out->present));
    if (!out->present) return absl::OkStatus();
    DTRAIN_RETURN_IF_ERROR(ReadOptimizerStep(r, what, &out->step));
    at::Tensor exp_avg;
    at::Tensor exp_avg_sq;
    DTRAIN_RETURN_IF_ERROR(
        ReadTensor(r, absl::StrCat(what, " exp_avg"), &exp_avg));
    DTRAIN_RETURN_IF_ERROR(
        ReadTensor(r, absl::StrCat(what, " exp_avg_sq"), &exp_avg_sq));
    out->tensors = {exp_avg, exp_avg_sq};
    bool has_max = false;
    DTRAIN_RETURN_IF_ERROR(
        r.Bool(absl::StrCat("has-max_exp_avg_sq byte of ", what), &has_max));
    if (has_max) {
      at::Tensor max_exp_avg_sq;
      DTRAIN_RETURN_IF_ERROR(ReadTensor(
          r, absl::StrCat(what, " max_exp_avg_sq"), &max_exp_avg_sq));
      out->tensors.push_back(max_exp_avg_sq);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<SavedParamState> Extract(
      const torch::optim::OptimizerParamState* state,
      absl::string_view what) const override {
    const auto* adam = dynamic_cast<const ParamState*>(state);
    if (state != nullptr && adam == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " has no ", name_, " state"));
    }
    SavedParamState out;
    out.present = adam != nullptr;
    if (!out.present) return out;
    out.step = adam->step();
    out.tensors = {adam->exp_avg(), adam->exp_avg_sq()};
    if (adam->max_exp_avg_sq().defined()) {
      out.tensors.push_back(adam->max_exp_avg_sq());
    }
    return out;
  }

  std::unique_ptr<torch::optim::OptimizerParamState> BuildState(
      const SavedParamState& saved,
      const at::TensorOptions& to) const override {
    auto adam = std::make_unique<ParamState>();
    adam->step(saved.step);
    adam->exp_avg(saved.tensors[0].to(to));
    adam->exp_avg_sq(saved.tensors[1].to(to));
    if (saved.tensors.size() > 2) {
      adam->max_exp_avg_sq(saved.tensors[2].to(to));
    }
    return adam;
  }

 private:
  const uint8_t kind_;
  const absl::string_view name_;
  const absl::string_view type_name_;
};

}  // namespace

const OptimizerCodec& AdamCodec() {
  static const AdamFamily<torch::optim::Adam, torch::optim::AdamOptions,
                          torch::optim::AdamParamState>
      codec(3, "adam", "torch::optim::Adam");
  return codec;
}

const OptimizerCodec& AdamWCodec() {
  static const AdamFamily<torch::optim::AdamW, torch::optim::AdamWOptions,
                          torch::optim::AdamWParamState>
      codec(4, "adamw", "torch::optim::AdamW");
  return codec;
}

}  // namespace dtrain::trainer::internal
