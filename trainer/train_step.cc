#include "trainer/train_step.h"

#include <ATen/Functions.h>
#include <torch/nn/utils/clip_grad.h>

#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "base/torch_guard.h"
#include "trainer/report/meters.h"

namespace dtrain::trainer {

uint64_t MicroBatchSeed(uint64_t seed, int rank, int64_t micro_batch) {
  // SplitMix64's finaliser decorrelates the inputs.
  uint64_t z =
      seed ^ (uint64_t{0x9E3779B97F4A7C15} * (rank + 1)) ^
      (uint64_t{0xD1B54A32D192ED03} * static_cast<uint64_t>(micro_batch));
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EB;
  return (z ^ (z >> 31)) >> 1;  // manual_seed takes it as uint64; keep < 2^63
}

TrainStep::TrainStep(const StepOptions& options, models::Model& model,
                     ddp::DistributedDataParallel& ddp,
                     torch::optim::Optimizer& optimizer,
                     const c10::Device& device)
    : options_(options),
      model_(model),
      ddp_(ddp),
      optimizer_(optimizer),
      device_(device),
      parameters_(model.parameters()) {
  if (options.precision == Precision::kFloat16) scaler_.emplace();
}

absl::Status TrainStep::Begin(int64_t micro_batches) {
  if (micro_batches_ != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("a step of ", micro_batches_, " micro-batches is open (",
                     done_, " done): finish it first"));
  }
  if (micro_batches < 1 || micro_batches > options_.accumulate_steps) {
    return absl::InvalidArgumentError(
        absl::StrCat("a step takes 1 to ", options_.accumulate_steps,
                     " micro-batches, not ", micro_batches));
  }
  micro_batches_ = micro_batches;
  done_ = 0;
  outcome_ = StepOutcome{};
  outcome_.phases.forward.reserve(micro_batches);
  outcome_.phases.backward.reserve(micro_batches);
  outcome_.loss_scale = scaler_.has_value() ? scaler_->scale() : 1.0;
  // In place, not reset to undefined (LibTorch 2's Optimizer::zero_grad): DDP's
  // .grad are views of its buckets, and a reset one costs a copy back.
  model_.zero_grad(/*set_to_none=*/false);
  return absl::OkStatus();
}

absl::Status TrainStep::MicroBatch(const at::Tensor& images,
                                   const at::Tensor& labels) {
  if (done_ >= micro_batches_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "micro-batch ", done_ + 1, " of a step of ", micro_batches_));
  }
  const bool last = done_ + 1 == micro_batches_;
  // All but the last accumulate locally; the last one's backward carries the
  // allreduce of the sum.
  absl::optional<ddp::DistributedDataParallel::NoSyncGuard> no_sync;
  if (!last) no_sync.emplace(ddp_);
  const absl::Time forward_start = absl::Now();
  DTRAIN_RETURN_IF_ERROR(ddp_.PrepareForward());
  at::Tensor output;
  at::Tensor loss;
  try {
    {
      AutocastGuard autocast(options_.precision, device_);
      output = model_.forward(images);
      // Cross entropy works for both built-in models: for the ConvNet, whose
      // output is already log-softmax, log_softmax changes nothing, so it
      // equals the book's nll_loss. Autocast runs it in float32.
      loss = at::cross_entropy_loss(output, labels, {}, at::Reduction::Mean);
    }
    const absl::Time backward_start = absl::Now();
    outcome_.phases.forward.push_back({forward_start, backward_start});
    const double weight = outcome_.loss_scale / micro_batches_;
    (weight == 1.0 ? loss : loss * weight).backward();
    outcome_.phases.backward.push_back({backward_start, absl::Now()});
  } catch (const std::exception& e) {
    micro_batches_ = 0;
    return absl::InternalError(
        absl::StrCat("forward/backward failed: ", base::ExceptionMessage(e)));
  }
  const int64_t n = labels.size(0);
  const std::vector<int64_t> correct = TopKCorrect(output, labels, {1, 5});
  outcome_.loss_sum += loss.item<double>() * n;
  outcome_.examples += n;
  outcome_.correct1 += correct[0];
  outcome_.correct5 += correct[1];
  ++done_;
  return absl::OkStatus();
}

absl::StatusOr<StepOutcome> TrainStep::Finish() {
  if (micro_batches_ == 0 || done_ != micro_batches_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Finish after ", done_, " of ", micro_batches_, " micro-batches"));
  }
  micro_batches_ = 0;
  StepPhases& phases = outcome_.phases;
  phases.synchronize.start = absl::Now();
  DTRAIN_RETURN_IF_ERROR(ddp_.SynchronizeGradients());
  phases.optimizer.start = phases.synchronize.end = absl::Now();
  DTRAIN_RETURN_IF_ERROR(StepOptimizer(&outcome_));
  phases.optimizer.end = absl::Now();
  return outcome_;
}

absl::Status TrainStep::ShadowStep() {
  if (micro_batches_ != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("a shadowed step while a step of ", micro_batches_,
                     " micro-batches is open"));
  }
  StepOutcome outcome;
  outcome.loss_scale = scaler_.has_value() ? scaler_->scale() : 1.0;
  return StepOptimizer(&outcome);
}

absl::Status TrainStep::StepOptimizer(StepOutcome* outcome) {
  // The gradients are averaged over ranks: every rank finds the same
  // non-finite values and clips by the same norm. With ZeRO's stage 2 the
  // averaged gradients are the shares', each rank holding its own: the ranks
  // agree on non-finite values, and the norm is over every share.
  const bool shares = zero_ != nullptr && zero_->stage() == 2;
  auto failed = [](const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("optimizer step failed: ", base::ExceptionMessage(e)));
  };
  if (scaler_.has_value()) {
    // The parameters are not copied per step: only the shares' list is made.
    std::vector<at::Tensor> share_grads;
    if (shares) share_grads = zero_->StepGradientShares();
    const std::vector<at::Tensor>& grads = shares ? share_grads : parameters_;
    bool found = false;
    try {
      found = scaler_->UnscaleAndCheck(grads);
    } catch (const std::exception& e) {
      return failed(e);
    }
    if (shares) {
      DTRAIN_ASSIGN_OR_RETURN(found, zero_->AnyRank(found));
    }
    outcome->skipped = found;
    scaler_->Update(found);
  }
  if (options_.clip_grad_norm > 0 && !outcome->skipped) {
    if (shares) {
      DTRAIN_ASSIGN_OR_RETURN(outcome->grad_norm, zero_->ClipShareGradNorm(
                                                      options_.clip_grad_norm));
    } else {
      try {
        outcome->grad_norm = torch::nn::utils::clip_grad_norm_(
            parameters_, options_.clip_grad_norm);
      } catch (const std::exception& e) {
        return failed(e);
      }
    }
  }
  if (!outcome->skipped) {
    if (zero_ != nullptr) {
      DTRAIN_RETURN_IF_ERROR(zero_->Step());
    } else {
      try {
        optimizer_.step();
      } catch (const std::exception& e) {
        return failed(e);
      }
    }
  }
  if (averager_ != nullptr) {
    DTRAIN_RETURN_IF_ERROR(averager_->AverageParameters(parameters_));
  }
  return absl::OkStatus();
}

}  // namespace dtrain::trainer
