// optim::Adadelta in checkpoints: options lr, rho, eps, weight_decay
// (float64) and maximize (bool), restored on load; per parameter the step
// (int64), square_avg and acc_delta.
#include <memory>

#include "absl/strings/str_cat.h"
#include "base/byte_codec.h"
#include "base/status_macros.h"
#include "optim/adadelta.h"
#include "trainer/checkpoint/optimizer_codec.h"
#include "trainer/checkpoint/tensor_codec.h"

namespace dtrain::trainer::internal {
namespace {

class Adadelta final : public OptimizerCodec {
 public:
  uint8_t kind() const override { return 2; }
  absl::string_view name() const override { return "adadelta"; }
  absl::string_view type_name() const override { return "optim::Adadelta"; }
  bool Handles(const torch::optim::Optimizer& optimizer) const override {
    return dynamic_cast<const optim::Adadelta*>(&optimizer) != nullptr;
  }
  size_t min_options_size() const override { return 4 * 8 + 1; }
  bool RestoresOptions() const override { return true; }

  absl::Status WriteOptions(const torch::optim::OptimizerOptions& options,
                            size_t group, base::ByteWriter& w) const override {
    const auto* adadelta =
        dynamic_cast<const optim::AdadeltaOptions*>(&options);
    if (adadelta == nullptr) {
      return w.Error(absl::StrCat("optimizer group ", group,
                                  " does not have adadelta options"));
    }
    w.F64(adadelta->lr()).F64(adadelta->rho()).F64(adadelta->eps());
    w.F64(adadelta->weight_decay()).Bool(adadelta->maximize());
    return absl::OkStatus();
  }

  absl::Status ReadOptions(base::ByteReader& r, absl::string_view where,
                           SavedGroup* out) const override {
    const std::string what = absl::StrCat("options of ", where);
    double values[4];
    for (double& value : values) DTRAIN_RETURN_IF_ERROR(r.F64(what, &value));
    bool maximize = false;
    DTRAIN_RETURN_IF_ERROR(r.Bool(what, &maximize));
    auto options = std::make_unique<optim::AdadeltaOptions>();
    options->lr(values[0])
        .rho(values[1])
        .eps(values[2])
        .weight_decay(values[3])
        .maximize(maximize);
    if (absl::Status valid = optim::Validate(*options); !valid.ok()) {
      return Malformed(absl::StrCat(where, ": ", valid.message()));
    }
    out->options = std::move(options);
    return absl::OkStatus();
  }

  absl::Status WriteState(const torch::optim::OptimizerParamState* state,
                          absl::string_view what,
                          base::ByteWriter& w) const override {
    const auto* adadelta =
        dynamic_cast<const optim::AdadeltaParamState*>(state);
    if (state != nullptr && adadelta == nullptr) {
      return w.Error(absl::StrCat(what, " has no Adadelta state"));
    }
    w.Bool(adadelta != nullptr);
    if (adadelta == nullptr) return absl::OkStatus();
    w.I64(adadelta->step());
    DTRAIN_RETURN_IF_ERROR(WriteTensor(adadelta->square_avg(),
                                       absl::StrCat(what, " square_avg"), w));
    return WriteTensor(adadelta->acc_delta(), absl::StrCat(what, " acc_delta"),
                       w);
  }

  absl::Status ReadState(base::ByteReader& r, absl::string_view what,
                         SavedParamState* out) const override {
    DTRAIN_RETURN_IF_ERROR(
        r.Bool(absl::StrCat("has-state byte of ", what), &out->present));
    if (!out->present) return absl::OkStatus();
    DTRAIN_RETURN_IF_ERROR(ReadOptimizerStep(r, what, &out->step));
    at::Tensor square_avg;
    at::Tensor acc_delta;
    DTRAIN_RETURN_IF_ERROR(
        ReadTensor(r, absl::StrCat(what, " square_avg"), &square_avg));
    DTRAIN_RETURN_IF_ERROR(
        ReadTensor(r, absl::StrCat(what, " acc_delta"), &acc_delta));
    out->tensors = {square_avg, acc_delta};
    return absl::OkStatus();
  }

  absl::StatusOr<SavedParamState> Extract(
      const torch::optim::OptimizerParamState* state,
      absl::string_view what) const override {
    const auto* adadelta =
        dynamic_cast<const optim::AdadeltaParamState*>(state);
    if (state != nullptr && adadelta == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " has no Adadelta state"));
    }
    SavedParamState out;
    out.present = adadelta != nullptr;
    if (!out.present) return out;
    out.step = adadelta->step();
    out.tensors = {adadelta->square_avg(), adadelta->acc_delta()};
    return out;
  }

  std::unique_ptr<torch::optim::OptimizerParamState> BuildState(
      const SavedParamState& saved,
      const at::TensorOptions& to) const override {
    auto adadelta = std::make_unique<optim::AdadeltaParamState>();
    adadelta->step(saved.step);
    adadelta->square_avg(saved.tensors[0].to(to));
    adadelta->acc_delta(saved.tensors[1].to(to));
    return adadelta;
  }
};

}  // namespace

const OptimizerCodec& AdadeltaCodec() {
  static const Adadelta codec;
  return codec;
}

}  // namespace dtrain::trainer::internal
