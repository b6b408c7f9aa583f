#include "optim/adadelta.h"

#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>
#include <torch/utils.h>

#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/torch_compat.h"
#include "base/torch_guard.h"

namespace dtrain::optim {
namespace {

absl::Status ValidateGroups(
    const std::vector<torch::optim::OptimizerParamGroup>& groups) {
  // LibTorch 1.13 does not check this; a parameter listed twice would be
  // stepped twice.
  absl::flat_hash_map<const void*, std::pair<size_t, size_t>> seen;
  for (size_t g = 0; g < groups.size(); ++g) {
    const std::vector<torch::Tensor>& params = groups[g].params();
    for (size_t i = 0; i < params.size(); ++i) {
      auto [it, inserted] =
          seen.try_emplace(params[i].unsafeGetTensorImpl(), g, i);
      if (!inserted) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Adadelta: parameter ", i, " of group ", g, " is also parameter ",
            it->second.second, " of group ", it->second.first));
      }
    }
  }
  for (size_t i = 0; i < groups.size(); ++i) {
    if (!groups[i].has_options()) continue;
    const auto* options =
        dynamic_cast<const AdadeltaOptions*>(&groups[i].options());
    if (options == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Adadelta: parameter group ", i,
          " has the options of another optimizer, not AdadeltaOptions"));
    }
    if (absl::Status valid = Validate(*options); !valid.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter group ", i, ": ", valid.message()));
    }
  }
  return absl::OkStatus();
}

void ThrowIfError(const absl::Status& status) {
  TORCH_CHECK(status.ok(), std::string(status.message()));
}

}  // namespace

void AdadeltaOptions::serialize(
    torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(lr);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(rho);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(eps);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(weight_decay);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(maximize);
}

void AdadeltaOptions::serialize(torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, lr);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, rho);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, eps);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, weight_decay);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(bool, maximize);
}

bool operator==(const AdadeltaOptions& a, const AdadeltaOptions& b) {
  return a.lr() == b.lr() && a.rho() == b.rho() && a.eps() == b.eps() &&
         a.weight_decay() == b.weight_decay() && a.maximize() == b.maximize();
}

absl::Status Validate(const AdadeltaOptions& options) {
  // Written so that NaN fails too.
  if (!(options.lr() >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Adadelta: invalid learning rate ", options.lr(), " (must be >= 0)"));
  }
  if (!(options.rho() >= 0 && options.rho() <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Adadelta: invalid rho ", options.rho(), " (must be in [0, 1])"));
  }
  if (!(options.eps() >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Adadelta: invalid eps ", options.eps(), " (must be >= 0)"));
  }
  if (!(options.weight_decay() >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Adadelta: invalid weight_decay ", options.weight_decay(),
                     " (must be >= 0)"));
  }
  return absl::OkStatus();
}

void AdadeltaParamState::serialize(
    torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(step);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(square_avg);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(acc_delta);
}

void AdadeltaParamState::serialize(torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(int64_t, step);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(torch::Tensor, square_avg);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(torch::Tensor, acc_delta);
}

bool operator==(const AdadeltaParamState& a, const AdadeltaParamState& b) {
  return a.step() == b.step() && torch::equal(a.square_avg(), b.square_avg()) &&
         torch::equal(a.acc_delta(), b.acc_delta());
}

Adadelta::Adadelta(std::vector<torch::optim::OptimizerParamGroup> param_groups,
                   AdadeltaOptions defaults)
    // A copy: the groups' own options are restored from param_groups below.
    : Optimizer(param_groups, std::make_unique<AdadeltaOptions>(defaults)) {
  torch_compat::KeepGroupOptions(param_groups, param_groups_);
  ThrowIfError(Validate(defaults));
  ThrowIfError(ValidateGroups(param_groups_));
}

Adadelta::Adadelta(std::vector<torch::Tensor> params, AdadeltaOptions defaults)
    : Adadelta(
          std::vector<torch::optim::OptimizerParamGroup>{
              torch::optim::OptimizerParamGroup(std::move(params))},
          defaults) {}

absl::StatusOr<std::unique_ptr<Adadelta>> Adadelta::Create(
    std::vector<torch::optim::OptimizerParamGroup> param_groups,
    AdadeltaOptions defaults) {
  DTRAIN_RETURN_IF_ERROR(Validate(defaults));
  DTRAIN_RETURN_IF_ERROR(ValidateGroups(param_groups));
  // LibTorch's own checks, e.g. a parameter in two groups.
  return base::GuardTorch(
      absl::StatusCode::kInvalidArgument,
      "Adadelta: ", [&]() -> absl::StatusOr<std::unique_ptr<Adadelta>> {
        return std::make_unique<Adadelta>(std::move(param_groups), defaults);
      });
}

torch::Tensor Adadelta::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (size_t g = 0; g < param_groups_.size(); ++g) {
    torch::optim::OptimizerParamGroup& group = param_groups_[g];
    // add_param_group bypasses the constructor's checks.
    const auto* options =
        dynamic_cast<const AdadeltaOptions*>(&group.options());
    TORCH_CHECK(options != nullptr, "Adadelta: parameter group ", g,
                " has the options of another optimizer");
    const double lr = options->lr();
    const double rho = options->rho();
    const double eps = options->eps();
    const double weight_decay = options->weight_decay();
    for (torch::Tensor& param : group.params()) {
      if (!param.grad().defined()) continue;
      torch::Tensor grad = param.grad();
      TORCH_CHECK(!grad.is_sparse(),
                  "Adadelta does not support sparse gradients");
      std::unique_ptr<torch::optim::OptimizerParamState>& slot =
          state_[torch_compat::OptimizerStateKeyOf(param)];
      if (slot == nullptr) {
        auto state = std::make_unique<AdadeltaParamState>();
        state->square_avg(
            torch::zeros_like(param, torch::MemoryFormat::Preserve));
        state->acc_delta(
            torch::zeros_like(param, torch::MemoryFormat::Preserve));
        slot = std::move(state);
      }
      auto& state = static_cast<AdadeltaParamState&>(*slot);
      state.step(state.step() + 1);

      if (options->maximize()) grad = -grad;
      if (weight_decay != 0) grad = grad.add(param, weight_decay);
      torch::Tensor square_avg = state.square_avg();
      torch::Tensor acc_delta = state.acc_delta();
      if (param.is_complex()) {
        square_avg = torch::view_as_real(square_avg);
        acc_delta = torch::view_as_real(acc_delta);
        grad = torch::view_as_real(grad);
      }
      square_avg.mul_(rho).addcmul_(grad, grad, 1 - rho);
      const torch::Tensor std_dev = square_avg.add(eps).sqrt_();
      torch::Tensor delta = acc_delta.add(eps).sqrt_().div_(std_dev).mul_(grad);
      acc_delta.mul_(rho).addcmul_(delta, delta, 1 - rho);
      if (param.is_complex()) delta = torch::view_as_complex(delta);
      param.add_(delta, -lr);
    }
  }
  return loss;
}

void Adadelta::save(torch::serialize::OutputArchive& archive) const {
  serialize(*this, archive);
}

void Adadelta::load(torch::serialize::InputArchive& archive) {
  // Read the groups' options first: a malformed archive then throws before
  // anything changed.
  torch::serialize::InputArchive groups_archive;
  archive.read("param_groups", groups_archive);
  std::vector<std::pair<std::vector<std::string>,
                        std::unique_ptr<torch::optim::OptimizerOptions>>>
      saved_groups;
  torch::optim::detail::serialize<AdadeltaOptions>(groups_archive,
                                                   saved_groups);
  TORCH_CHECK(saved_groups.size() == param_groups_.size(),
              "Adadelta::load: the archive has ", saved_groups.size(),
              " parameter groups, this optimizer ", param_groups_.size());
  for (size_t g = 0; g < saved_groups.size(); ++g) {
    TORCH_CHECK(
        saved_groups[g].first.size() == param_groups_[g].params().size(),
        "Adadelta::load: parameter group ", g, " has ",
        saved_groups[g].first.size(), " parameters in the archive, ",
        param_groups_[g].params().size(), " here");
  }

  // PyTorch replaces the whole state; keep the old one until the new one is
  // known to fit.
  auto previous = std::move(state_);
  state_.clear();
  try {
    serialize(*this, archive);
    for (const torch::optim::OptimizerParamGroup& group : param_groups_) {
      for (const torch::Tensor& param : group.params()) {
        auto it = state_.find(torch_compat::OptimizerStateKeyOf(param));
        if (it == state_.end()) continue;
        auto& state = static_cast<AdadeltaParamState&>(*it->second);
        TORCH_CHECK(state.square_avg().sizes() == param.sizes() &&
                        state.acc_delta().sizes() == param.sizes(),
                    "Adadelta::load: saved state of shape ",
                    state.square_avg().sizes(),
                    " does not fit a parameter of shape ", param.sizes());
        // As PyTorch's load_state_dict: follow the parameter's device and,
        // for floating-point parameters, its dtype.
        torch::TensorOptions to = torch::TensorOptions().device(param.device());
        if (param.is_floating_point()) to = to.dtype(param.dtype());
        state.square_avg(state.square_avg().to(to));
        state.acc_delta(state.acc_delta().to(to));
      }
    }
  } catch (...) {
    state_ = std::move(previous);
    throw;
  }
  for (size_t g = 0; g < saved_groups.size(); ++g) {
    param_groups_[g].set_options(std::move(saved_groups[g].second));
  }
}

const AdadeltaParamState* Adadelta::StateOf(const torch::Tensor& param) const {
  auto it = state_.find(torch_compat::OptimizerStateKeyOf(param));
  if (it == state_.end()) return nullptr;
  return static_cast<const AdadeltaParamState*>(it->second.get());
}

}  // namespace dtrain::optim
