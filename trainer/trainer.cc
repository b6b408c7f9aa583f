#include "trainer/trainer.h"

#include <torch/optim/optimizer.h>
#include <torch/utils.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/compute_threads.h"
#include "base/rank_status.h"
#include "base/status_macros.h"
#include "data/loader.h"
#include "dist/ddp/ddp.h"
#include "dist/ddp/sync_batch_norm.h"
#include "models/state_dict/state_dict.h"
#include "optim/lr_schedule.h"
#include "trainer/amp.h"
#include "trainer/evaluation.h"
#include "trainer/loop_checkpoints.h"
#include "trainer/rank_sync.h"
#include "trainer/report/recorder.h"
#include "trainer/run_parts.h"
#include "trainer/stop_vote.h"
#include "trainer/train_step.h"
#include "trainer/training_data.h"

namespace dtrain::trainer {
namespace {

// The generator state for one micro-batch's random draws (dropout): a
// function of the seed, the rank and the step only, so that a resumed run
// draws what the uninterrupted one did. SplitMix64's finaliser decorrelates
// the inputs.
uint64_t StepSeed(uint64_t seed, int rank, int64_t step) {
  uint64_t z = seed ^ (uint64_t{0x9E3779B97F4A7C15} * (rank + 1)) ^
               (uint64_t{0xD1B54A32D192ED03} * static_cast<uint64_t>(step));
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EB;
  return (z ^ (z >> 31)) >> 1;  // manual_seed takes it as uint64; keep < 2^63
}

class Run {
 public:
  Run(const TrainOptions& o, const rendezvous::World& world,
      backend::Backend& backend, const TrainContext& context)
      : o_(o), world_(world), backend_(backend), context_(context) {}

  absl::StatusOr<TrainResult> Execute();

 private:
  absl::Status Setup();
  absl::Status Resume();
  // One epoch's training pass; true when the run stops inside it.
  absl::StatusOr<bool> TrainEpoch(int64_t epoch, EpochMetrics* m);
  // One optimizer step over accumulate_steps batches (fewer at the end).
  absl::StatusOr<StepOutcome> Step(int64_t epoch, int64_t s);
  StepRecord Record(const StepOutcome& outcome, double lr) const;
  // The epoch's validation after its checkpoint; a signal ends it early.
  absl::Status ValidateEpoch(const data::SamplerState& next, int64_t epoch,
                             EpochMetrics* m);
  absl::StatusOr<Scores> Validate(int64_t max_batches, bool stoppable);
  // A few validation batches before the first step (--num_sanity_val_steps).
  absl::Status SanityCheckValidation();
  // --evaluate: one validation pass of the loaded weights, reported and
  // written to the metrics file as the run's only epoch entry.
  absl::StatusOr<TrainResult> Evaluate();
  // Rank 0 writes --save_state_dict (when set).
  absl::Status SaveStateDict();
  // Before saving weights: the last step's gradient allreduces finished well
  // (on CUDA they may fail after the step was queued).
  absl::Status ConfirmLastStep();
  absl::Status SaveCheckpoint(const data::SamplerState& sampler, int64_t epoch,
                              bool best);
  // The ranks' parameters checked identical, the weights and the metrics
  // written.
  absl::StatusOr<TrainResult> Finish();
  void Say(const std::string& line) { recorder_->Say(line); }

  const TrainOptions& o_;
  const rendezvous::World& world_;
  backend::Backend& backend_;
  const TrainContext& context_;

  c10::Device device_{c10::kCPU};
  absl::optional<RankSync> sync_;
  std::unique_ptr<Recorder> recorder_;
  absl::optional<TrainingData> data_;
  std::shared_ptr<models::Model> model_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  absl::optional<optim::LrSchedule> schedule_;
  std::unique_ptr<ddp::DistributedDataParallel> ddp_;
  std::unique_ptr<TrainStep> step_;
  std::unique_ptr<StopVote> stop_vote_;
  std::unique_ptr<data::DataLoader> train_loader_;
  std::unique_ptr<data::DataLoader> val_loader_;
  absl::optional<LoopCheckpoints> checkpoints_;

  int64_t start_epoch_ = 0;
  // Loader batches in a whole epoch.
  int64_t batches_per_epoch_ = 0;
  int64_t global_step_ = 0;
  double best_top1_ = 0;
  // The ranks agreed to stop at this step boundary (a signal).
  bool signal_stop_ = false;
};

absl::Status Run::Setup() {
  DTRAIN_RETURN_IF_ERROR(trainer::Validate(o_));
  // Before anything takes time: a path that cannot be written would
  // otherwise fail only after training, losing the weights.
  DTRAIN_RETURN_IF_ERROR(CheckOutputPaths(o_, world_.rank));
  base::SetComputeThreads(o_.intra_op_threads);
  DTRAIN_ASSIGN_OR_RETURN(device_, TrainingDevice(o_, context_.cuda_device));
  DTRAIN_ASSIGN_OR_RETURN(const Precision precision, ParsePrecision(o_.amp));
  DTRAIN_RETURN_IF_ERROR(CheckPrecision(precision, device_));
  sync_.emplace(backend_, device_, o_.timeout);
  DTRAIN_ASSIGN_OR_RETURN(
      recorder_,
      Recorder::Create(o_,
                       {context_.log,
                        context_.log_is_terminal,
                        context_.start,
                        {world_.rank, world_.world_size, world_.local_rank,
                         o_.model, std::string(backend_.name())}},
                       *sync_));
  RunMetrics& metrics = recorder_->metrics();

  DTRAIN_ASSIGN_OR_RETURN(data_, LoadTrainingData(o_));
  Say(absl::StrCat("data: ", data_->description));
  DTRAIN_ASSIGN_OR_RETURN(BuiltModel built,
                          BuildModel(o_, *data_, backend_, device_));
  model_ = std::move(built.model);
  for (const std::string& note : built.notes) Say(note);
  metrics.sync_batchnorm_layers = ddp::LabelSyncBatchNorms(*model_);
  DTRAIN_ASSIGN_OR_RETURN(optimizer_, MakeOptimizer(o_, model_->parameters()));
  DTRAIN_ASSIGN_OR_RETURN(
      train_loader_, MakeLoader(data_->train, data_->train_transforms, o_,
                                world_, /*shuffle=*/true, device_.is_cuda()));
  DTRAIN_ASSIGN_OR_RETURN(
      val_loader_, MakeLoader(data_->val, data_->val_transforms, o_, world_,
                              /*shuffle=*/false, device_.is_cuda()));
  batches_per_epoch_ = train_loader_->batches_left();
  // Created before a checkpoint is loaded, so that the base rates are the
  // configured ones, not a decayed rate from the checkpoint.
  DTRAIN_ASSIGN_OR_RETURN(
      schedule_, MakeSchedule(o_, *optimizer_,
                              std::max<int64_t>(1, (batches_per_epoch_ +
                                                    o_.accumulate_steps - 1) /
                                                       o_.accumulate_steps)));
  if (!o_.checkpoint_dir.empty()) {
    DTRAIN_ASSIGN_OR_RETURN(
        checkpoints_,
        LoopCheckpoints::Open(o_.checkpoint_dir, backend_,
                              {o_.keep_checkpoints, device_, o_.timeout,
                               o_.model, *o_.optimizer}));
  }
  if (o_.resume) DTRAIN_RETURN_IF_ERROR(Resume());

  DTRAIN_ASSIGN_OR_RETURN(ddp_, ddp::DistributedDataParallel::Create(
                                    model_, backend_, MakeDdpOptions(o_)));
  ddp_->set_gradient_sync(o_.sync_gradients);
  step_ = std::make_unique<TrainStep>(
      StepOptions{o_.accumulate_steps, precision, o_.clip_grad_norm}, *model_,
      *ddp_, *optimizer_, device_);
  stop_vote_ = std::make_unique<StopVote>(*sync_, context_.stop_requested,
                                          /*collective=*/o_.sync_gradients);

  metrics.options = o_;
  metrics.world_size = world_.world_size;
  metrics.backend = std::string(backend_.name());
  metrics.backend_layout = backend_.layout();
  metrics.device = device_.str();
  metrics.data = data_->description;
  metrics.launch_source = std::string(world_.launch.source_name());
  metrics.parameters = models::NumParameters(*model_);
  Say(RunSummary(o_, metrics, ddp_->buckets().size(), precision));
  return absl::OkStatus();
}

absl::Status Run::Resume() {
  DTRAIN_ASSIGN_OR_RETURN(
      const TrainingState state,
      checkpoints_->Resume(*model_, *optimizer_,
                           // Evaluation needs the weights only, on any
                           // number of ranks.
                           o_.evaluate ? nullptr : train_loader_.get()));
  for (const std::string& skipped : checkpoints_->skipped())
    Say(absl::StrCat("skipping checkpoint ", skipped));
  if (!checkpoints_->resumed()) {
    Say(absl::StrCat("no checkpoint in ", o_.checkpoint_dir,
                     ": starting from the beginning"));
    return absl::OkStatus();
  }
  recorder_->metrics().resumed_from = checkpoints_->resumed_from();
  start_epoch_ = state.epoch;
  global_step_ = state.global_step;
  best_top1_ = state.best_top1;
  if (o_.evaluate) {
    Say(absl::StrCat("loaded ", checkpoints_->resumed_from(), " (step ",
                     global_step_, ")"));
  } else {
    Say(ResumeLine(state, train_loader_->sampler(), data_->train->size(),
                   world_.world_size, checkpoints_->resumed_from()));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> Run::TrainEpoch(int64_t epoch, EpochMetrics* m) {
  model_->train();
  const int64_t per_step = o_.accumulate_steps;
  const int64_t batches_left = train_loader_->batches_left();
  // Resumed inside an epoch: checkpoints fall on step boundaries.
  const int64_t first_step = (batches_per_epoch_ - batches_left) / per_step;
  const int64_t steps =
      std::min((batches_left + per_step - 1) / per_step,
               o_.max_steps > 0 ? o_.max_steps - global_step_
                                : std::numeric_limits<int64_t>::max());
  recorder_->StartEpoch(epoch, steps,
                        schedule_->LearningRate(epoch, first_step));
  for (int64_t s = 0; s < steps && train_loader_->batches_left() > 0; ++s) {
    DTRAIN_RETURN_IF_ERROR(schedule_->SetStep(epoch, first_step + s));
    DTRAIN_ASSIGN_OR_RETURN(const StepOutcome outcome, Step(epoch, s));
    // The vote's round trip overlaps the step's reporting: a signal that
    // arrived during this step stops the run at its end, not a step later.
    stop_vote_->Issue();
    ++global_step_;
    DTRAIN_RETURN_IF_ERROR(recorder_->Step(
        Record(outcome, schedule_->LearningRate(epoch, first_step + s))));
    DTRAIN_ASSIGN_OR_RETURN(signal_stop_, stop_vote_->Collect());
    if (signal_stop_) break;
    if (o_.checkpoint_every_steps > 0 &&
        global_step_ % o_.checkpoint_every_steps == 0 &&
        train_loader_->batches_left() > 0) {
      DTRAIN_RETURN_IF_ERROR(
          SaveCheckpoint(train_loader_->state(), epoch, /*best=*/false));
    }
  }
  const LossScaler* scaler = step_->loss_scaler();
  DTRAIN_ASSIGN_OR_RETURN(
      *m, recorder_->EndEpoch(schedule_->LearningRate(epoch, first_step),
                              scaler != nullptr
                                  ? absl::make_optional(scaler->scale())
                                  : absl::nullopt,
                              global_step_));
  // Stopped inside the epoch (max_steps, a signal): the checkpoint keeps the
  // position.
  return ((o_.max_steps > 0 && global_step_ >= o_.max_steps) || signal_stop_) &&
         train_loader_->batches_left() > 0;
}

absl::StatusOr<StepOutcome> Run::Step(int64_t epoch, int64_t s) {
  const int64_t micro_batches =
      std::min(o_.accumulate_steps, train_loader_->batches_left());
  DTRAIN_RETURN_IF_ERROR(step_->Begin(micro_batches));
  for (int64_t j = 0; j < micro_batches; ++j) {
    const absl::Time wait = absl::Now();
    DTRAIN_ASSIGN_OR_RETURN(absl::optional<data::Batch> batch,
                            train_loader_->Next());
    if (!batch.has_value()) {
      return absl::InternalError(absl::StrCat("epoch ", epoch, " step ", s,
                                              ": the loader ended early"));
    }
    recorder_->DataWait(absl::ToDoubleSeconds(absl::Now() - wait));
    at::Tensor images = batch->images.to(device_, /*non_blocking=*/true);
    at::Tensor labels = batch->labels.to(device_, /*non_blocking=*/true);
    // One seed per micro-batch: with accumulate_steps 1, per step.
    torch::manual_seed(
        StepSeed(o_.seed, world_.rank, global_step_ * o_.accumulate_steps + j));
    if (absl::Status st = step_->MicroBatch(images, labels); !st.ok()) {
      return absl::Status(
          st.code(), absl::StrCat("epoch ", epoch, " step ", s, " micro-batch ",
                                  j, ": ", st.message()));
    }
  }
  return step_->Finish();
}

StepRecord Run::Record(const StepOutcome& outcome, double lr) const {
  StepRecord r;
  r.examples = outcome.examples;
  r.loss_sum = outcome.loss_sum;
  r.correct1 = outcome.correct1;
  r.correct5 = outcome.correct5;
  r.grad_norm = outcome.grad_norm;
  r.skipped = outcome.skipped;
  if (o_.sync_gradients) r.ddp = &ddp_->last_step_stats();
  r.global_step = global_step_;
  r.learning_rate = lr;
  return r;
}

absl::StatusOr<Scores> Run::Validate(int64_t max_batches, bool stoppable) {
  EvaluationOptions options;
  options.max_batches = max_batches;
  if (stoppable && o_.sync_gradients)
    options.stop_requested = context_.stop_requested;
  return EvaluateOnRanks(*model_, *val_loader_, data_->val->size(), *sync_,
                         options);
}

absl::Status Run::SanityCheckValidation() {
  if (o_.num_sanity_val_steps <= 0 || o_.skip_validation)
    return absl::OkStatus();
  const absl::Time start = absl::Now();
  absl::StatusOr<Scores> scores =
      Validate(o_.num_sanity_val_steps, /*stoppable=*/false);
  if (!scores.ok()) {
    return absl::Status(
        scores.status().code(),
        absl::StrCat("validation sanity check (the first ",
                     o_.num_sanity_val_steps,
                     " validation batches per rank, before training; "
                     "--num_sanity_val_steps=0 skips it): ",
                     scores.status().message()));
  }
  Say(absl::StrFormat(
      "validation sanity check: %d batches per rank, %.0f examples, loss "
      "%.4f (%.1f s)",
      o_.num_sanity_val_steps, scores->examples, scores->loss,
      absl::ToDoubleSeconds(absl::Now() - start)));
  return absl::OkStatus();
}

absl::Status Run::ValidateEpoch(const data::SamplerState& next, int64_t epoch,
                                EpochMetrics* m) {
  if (o_.skip_validation || signal_stop_) return absl::OkStatus();
  const absl::Time start = absl::Now();
  absl::StatusOr<Scores> scores = Validate(0, /*stoppable=*/true);
  if (absl::IsCancelled(scores.status())) {
    signal_stop_ = true;
    Say(absl::StrCat("validation of epoch ", epoch + 1,
                     " stopped by a signal; it is not repeated on --resume "
                     "(--evaluate gives it)"));
    return absl::OkStatus();
  }
  DTRAIN_RETURN_IF_ERROR(scores.status());
  m->val_loss = scores->loss;
  m->val_top1 = scores->top1;
  m->val_top5 = scores->top5;
  m->val_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  const bool best = *m->val_top1 > best_top1_;
  best_top1_ = std::max(best_top1_, *m->val_top1);
  Say(absl::StrFormat(
      " * validation: loss %.4f  Prec@1 %.3f  Prec@5 %.3f  (best Prec@1 "
      "%.3f, %.1f s)",
      *m->val_loss, *m->val_top1, *m->val_top5, best_top1_, m->val_seconds));
  // Again with the new best accuracy in it, and as best.dtc.
  if (best) DTRAIN_RETURN_IF_ERROR(SaveCheckpoint(next, next.epoch, best));
  return absl::OkStatus();
}

absl::StatusOr<TrainResult> Run::Evaluate() {
  if (!(checkpoints_.has_value() && checkpoints_->resumed()) &&
      o_.init_state_dict.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--evaluate: no checkpoint in ", o_.checkpoint_dir, " to evaluate"));
  }
  EpochMetrics m;
  m.epoch = start_epoch_;
  const absl::Time start = absl::Now();
  DTRAIN_ASSIGN_OR_RETURN(const Scores scores, Validate(0, true));
  m.val_loss = scores.loss;
  m.val_top1 = scores.top1;
  m.val_top5 = scores.top5;
  m.val_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  best_top1_ = scores.top1;
  const std::string& from = recorder_->metrics().resumed_from;
  Say(absl::StrFormat(
      " * evaluation of %s: loss %.4f  Prec@1 %.3f  Prec@5 %.3f  (%.1f s)",
      from.empty() ? o_.init_state_dict : from, scores.loss, scores.top1,
      scores.top5, m.val_seconds));
  recorder_->metrics().epochs.push_back(m);
  // --evaluate --save_state_dict: also turns a checkpoint into weights.
  DTRAIN_RETURN_IF_ERROR(SaveStateDict());
  DTRAIN_RETURN_IF_ERROR(recorder_->WriteMetrics(best_top1_, global_step_));
  return TrainResult{recorder_->metrics(), model_};
}

absl::Status Run::SaveCheckpoint(const data::SamplerState& sampler,
                                 int64_t epoch, bool best) {
  if (world_.rank != 0 || !checkpoints_) return absl::OkStatus();
  DTRAIN_RETURN_IF_ERROR(ConfirmLastStep());
  TrainingState state;
  state.epoch = epoch;
  state.sampler = sampler;
  state.global_step = global_step_;
  state.best_top1 = best_top1_;
  state.model_name = o_.model;
  state.optimizer_name = *o_.optimizer;
  state.seed = o_.seed;
  std::vector<std::string> warnings;
  DTRAIN_RETURN_IF_ERROR(
      checkpoints_->Save(*model_, *optimizer_, state, best, &warnings)
          .status());
  for (const std::string& warning : warnings) Say(warning);
  if (o_.state_dict_with_checkpoints) return SaveStateDict();
  return absl::OkStatus();
}

absl::Status Run::ConfirmLastStep() {
  if (ddp_ == nullptr) return absl::OkStatus();
  absl::Status s = ddp_->ConfirmLastStep();
  if (s.ok()) return s;
  return absl::Status(
      s.code(), absl::StrCat("nothing saved at step ", global_step_,
                             ": its gradient averaging failed: ", s.message()));
}

absl::Status Run::SaveStateDict() {
  if (world_.rank != 0 || o_.save_state_dict.empty()) return absl::OkStatus();
  DTRAIN_RETURN_IF_ERROR(ConfirmLastStep());
  if (absl::Status s =
          models::state_dict::SaveStateDict(*model_, o_.save_state_dict);
      !s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat("--save_state_dict: ", s.message()));
  }
  Say(absl::StrCat("state_dict written to ", o_.save_state_dict, " at step ",
                   global_step_));
  return absl::OkStatus();
}

absl::StatusOr<TrainResult> Run::Execute() {
  DTRAIN_RETURN_IF_ERROR(Setup());
  if (o_.evaluate) return Evaluate();
  const bool done = start_epoch_ >= *o_.epochs ||
                    (o_.max_steps > 0 && global_step_ >= o_.max_steps);
  if (done && checkpoints_.has_value() && checkpoints_->resumed()) {
    Say(absl::StrCat("nothing left to train: the checkpoint is at epoch ",
                     start_epoch_, " of ", *o_.epochs, ", step ", global_step_,
                     o_.max_steps > 0
                         ? absl::StrCat(" (--max_steps=", o_.max_steps, ")")
                         : "",
                     "; raise --epochs or --max_steps to train further"));
  }
  if (!done) DTRAIN_RETURN_IF_ERROR(SanityCheckValidation());
  for (int64_t epoch = start_epoch_; epoch < *o_.epochs; ++epoch) {
    if (o_.max_steps > 0 && global_step_ >= o_.max_steps) break;
    train_loader_->SetEpoch(epoch);
    DTRAIN_RETURN_IF_ERROR(schedule_->SetEpoch(epoch));
    Say(absl::StrFormat("Begin training epoch %d/%d (lr %g)", epoch + 1,
                        *o_.epochs, schedule_->LearningRate(epoch)));
    EpochMetrics m;
    DTRAIN_ASSIGN_OR_RETURN(const bool stopped, TrainEpoch(epoch, &m));
    // The epoch's checkpoint comes before its validation: a damaged
    // validation file or a signal during validation then costs no training.
    data::SamplerState next = train_loader_->state();
    if (!stopped) {
      next.epoch = epoch + 1;
      next.position = next.start = 0;
    }
    DTRAIN_RETURN_IF_ERROR(SaveCheckpoint(next, next.epoch, /*best=*/false));
    DTRAIN_RETURN_IF_ERROR(ValidateEpoch(next, epoch, &m));
    recorder_->metrics().epochs.push_back(m);
    DTRAIN_RETURN_IF_ERROR(recorder_->WriteMetrics(best_top1_, global_step_));
    if (signal_stop_) {
      return absl::CancelledError(
          absl::StrCat("stopped by a signal at step ", global_step_,
                       !o_.checkpoint_dir.empty()
                           ? absl::StrCat("; checkpoint in ", o_.checkpoint_dir,
                                          " (continue with --resume)")
                           : "; no --checkpoint_dir, nothing saved"));
    }
    if (stopped) {
      Say(absl::StrCat("stopped at --max_steps=", o_.max_steps));
      break;
    }
  }
  return Finish();
}

absl::StatusOr<TrainResult> Run::Finish() {
  if (o_.sync_gradients && world_.world_size > 1) {
    std::vector<std::pair<std::string, at::Tensor>> parameters;
    for (const auto& p : model_->named_parameters()) {
      parameters.emplace_back(p.key(), p.value());
    }
    DTRAIN_RETURN_IF_ERROR(sync_->CheckIdentical(parameters));
    recorder_->metrics().ranks_identical = true;
  }
  DTRAIN_RETURN_IF_ERROR(SaveStateDict());
  DTRAIN_RETURN_IF_ERROR(recorder_->WriteMetrics(best_top1_, global_step_));
  return TrainResult{recorder_->metrics(), model_};
}

}  // namespace

absl::StatusOr<TrainResult> Train(const TrainOptions& options,
                                  const rendezvous::World& world,
                                  backend::Backend& backend,
                                  const TrainContext& context) {
  Run run(options, world, backend, context);
  absl::StatusOr<TrainResult> result = run.Execute();
  if (!result.ok()) return base::WithRank(world.rank, result.status());
  return result;
}

}  // namespace dtrain::trainer
