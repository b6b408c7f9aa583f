// torch::optim::SGD in checkpoints: options lr, momentum, dampening,
// weight_decay (float64) and nesterov (bool); per parameter the momentum
// buffer. SGD keeps its own options on load, as LibTorch 1.13's SGD::load
// did; the checkpoint holds them for people and tools.
#include <torch/optim/sgd.h>

#include <memory>

#include "absl/strings/str_cat.h"
#include "base/byte_codec.h"
#include "base/status_macros.h"
#include "trainer/checkpoint/optimizer_codec.h"
#include "trainer/checkpoint/tensor_codec.h"

namespace dtrain::trainer::internal {
namespace {

class Sgd final : public OptimizerCodec {
 public:
  uint8_t kind() const override { return 1; }
  absl::string_view name() const override { return "sgd"; }
  absl::string_view type_name() const override { return "torch::optim::SGD"; }
  bool Handles(const torch::optim::Optimizer& optimizer) const override {
    return dynamic_cast<const torch::optim::SGD*>(&optimizer) != nullptr;
  }
  size_t min_options_size() const override { return 4 * 8 + 1; }
  bool RestoresOptions() const override { return false; }

  absl::Status WriteOptions(const torch::optim::OptimizerOptions& options,
                            size_t group, base::ByteWriter& w) const override {
    const auto* sgd = dynamic_cast<const torch::optim::SGDOptions*>(&options);
    if (sgd == nullptr) {
      return w.Error(absl::StrCat("optimizer group ", group,
                                  " does not have sgd options"));
    }
    w.F64(sgd->lr()).F64(sgd->momentum()).F64(sgd->dampening());
    w.F64(sgd->weight_decay()).Bool(sgd->nesterov());
    return absl::OkStatus();
  }

  absl::Status ReadOptions(base::ByteReader& r, absl::string_view where,
                           SavedGroup*) const override {
    const std::string what = absl::StrCat("options of ", where);
    double value = 0;
    for (int i = 0; i < 4; ++i) DTRAIN_RETURN_IF_ERROR(r.F64(what, &value));
    bool nesterov = false;
    return r.Bool(what, &nesterov);
  }

  absl::Status WriteState(const torch::optim::OptimizerParamState* state,
                          absl::string_view what,
                          base::ByteWriter& w) const override {
    const auto* sgd = dynamic_cast<const torch::optim::SGDParamState*>(state);
    if (state != nullptr && sgd == nullptr) {
      return w.Error(absl::StrCat(what, " has no SGD state"));
    }
    // State without a momentum buffer is no state.
    const bool present = sgd != nullptr && sgd->momentum_buffer().defined();
    w.Bool(present);
    if (!present) return absl::OkStatus();
    return WriteTensor(sgd->momentum_buffer(),
                       absl::StrCat(what, " momentum_buffer"), w);
  }

  absl::Status ReadState(base::ByteReader& r, absl::string_view what,
                         SavedParamState* out) const override {
    DTRAIN_RETURN_IF_ERROR(
        r.Bool(absl::StrCat("has-state byte of ", what), &out->present));
    if (!out->present) return absl::OkStatus();
    at::Tensor momentum;
    DTRAIN_RETURN_IF_ERROR(
        ReadTensor(r, absl::StrCat(what, " momentum_buffer"), &momentum));
    out->tensors = {momentum};
    return absl::OkStatus();
  }

  absl::StatusOr<SavedParamState> Extract(
      const torch::optim::OptimizerParamState* state,
      absl::string_view what) const override {
    const auto* sgd = dynamic_cast<const torch::optim::SGDParamState*>(state);
    if (state != nullptr && sgd == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " has no SGD state"));
    }
    SavedParamState out;
    out.present = sgd != nullptr && sgd->momentum_buffer().defined();
    if (out.present) out.tensors = {sgd->momentum_buffer()};
    return out;
  }

  std::unique_ptr<torch::optim::OptimizerParamState> BuildState(
      const SavedParamState& saved,
      const at::TensorOptions& to) const override {
    auto sgd = std::make_unique<torch::optim::SGDParamState>();
    sgd->momentum_buffer(saved.tensors[0].to(to));
    return sgd;
  }
};

}  // namespace

const OptimizerCodec& SgdCodec() {
  static const Sgd codec;
  return codec;
}

}  // namespace dtrain::trainer::internal
