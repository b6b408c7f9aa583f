#include "trainer/trainer.h"

#include <torch/optim/optimizer.h>
#include <torch/utils.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/process_memory.h"
#include "base/rank_status.h"
#include "base/status_macros.h"
#include "data/loader.h"
#include "dist/ddp/ddp.h"
#include "dist/ddp/join.h"
#include "trainer/checkpoint/checkpoint.h"
#include "trainer/checkpoint/hook_state.h"
#include "trainer/checkpoint/optimizer_state_bytes.h"
#include "trainer/evaluation.h"
#include "trainer/report/recorder.h"
#include "trainer/run_assembly.h"
#include "trainer/run_outputs.h"

namespace dtrain::trainer {
namespace {

// After a failure, how long rank 0 waits for the other ranks' traces in all.
constexpr absl::Duration kFailureWait = absl::Seconds(10);

// Uneven inputs: a rank that has run out of batches takes, after each
// shadowed synchronised iteration, the optimizer step the active ranks take
// (TrainStep::ShadowStep over the average DDP's shadow left in .grad), so
// that its optimizer state, loss scale and step count stay theirs.
class StepShadow : public ddp::Joinable {
 public:
  explicit StepShadow(std::function<absl::Status()> step)
      : step_(std::move(step)) {}
  std::string JoinableName() const override { return "optimizer step"; }
  absl::Status Shadow(const ddp::JoinRound& round) override {
    return round.grad_sync ? step_() : absl::OkStatus();
  }

 private:
  std::function<absl::Status()> step_;
};

class Run {
 public:
  Run(const TrainOptions& o, const rendezvous::World& world,
      backend::Backend& backend, const TrainContext& context)
      : o_(o), world_(world), backend_(backend), context_(context) {}

  absl::StatusOr<TrainResult> Execute();
  // After a failure: the datasets, and this rank's checkpoint as of its last
  // committed step, into `out` (nothing when training had not begun). Not
  // collective.
  void HandOver(ElasticHandover* out) const;
  // After a failure, with --trace: the failure noted and the ranks' traces
  // merged, each waiting a bounded time for the others. Not collective
  // through the backend.
  void TraceFailure(const absl::Status& failure);

 private:
  absl::Status Setup();
  bool Resumed() const {
    return p_.checkpoints.has_value() && p_.checkpoints->resumed();
  }
  // One epoch's training pass; true when the run stops inside it.
  absl::StatusOr<bool> TrainEpoch(int64_t epoch, EpochMetrics* m);
  // --even_batches=false with gradient averaging on 2+ ranks: each epoch
  // trains in a Join (dist/ddp/join.h).
  bool Uneven() const {
    return !o_.data.even_batches && o_.parallel.sync_gradients &&
           world_.world_size > 1;
  }
  // One optimizer step over accumulate_steps batches (fewer at the end).
  absl::StatusOr<StepOutcome> Step(int64_t epoch, int64_t s);
  StepRecord Record(const StepOutcome& outcome, double lr) const;
  // The epoch's validation after its checkpoint; a signal ends it early.
  absl::Status ValidateEpoch(const data::SamplerState& next, int64_t epoch,
                             EpochMetrics* m);
  // A validation pass into m's val_ fields; kCancelled when a signal
  // stopped it.
  absl::Status Validate(EpochMetrics* m);
  // --evaluate: one validation pass of the loaded weights, reported and
  // written to the metrics file as the run's only epoch entry.
  absl::StatusOr<TrainResult> Evaluate();
  absl::Status Checkpoint(const data::SamplerState& next, bool best,
                          bool together = true) {
    const absl::Time start = absl::Now();
    absl::Status st =
        outputs_->Checkpoint(next, global_step_, best_top1_, best, together);
    if (!o_.checkpoint.checkpoint_dir.empty())
      recorder_->Checkpointed(global_step_, start, absl::Now());
    return st;
  }
  // The ranks' parameters checked identical, the memory each rank used
  // gathered, the weights and the metrics written.
  absl::StatusOr<TrainResult> Finish();
  // Collective through the store: the trace file, with --trace; waiting at
  // most `timeout` for the other ranks.
  absl::Status WriteTrace(absl::Duration timeout);
  // Collective: every rank's optimizer state bytes and peak resident memory
  // into the metrics.
  absl::Status RecordMemory();
  void Say(const std::string& line) { recorder_->Say(line); }

  const TrainOptions& o_;
  const rendezvous::World& world_;
  backend::Backend& backend_;
  const TrainContext& context_;
  RunParts p_;
  absl::optional<RunOutputs> outputs_;
  // Shorthands for p_'s.
  Recorder* recorder_ = nullptr;
  models::Model* model_ = nullptr;
  data::DataLoader* train_loader_ = nullptr;

  int64_t global_step_ = 0;
  double best_top1_ = 0;
  // The loader's position after the last committed step (the optimizer
  // applied it), and that step: what an elastic hand-over saves.
  absl::optional<data::SamplerState> committed_sampler_;
  int64_t committed_step_ = 0;
  bool first_step_reported_ = false;
  // The ranks agreed to stop at this step boundary (a signal).
  bool signal_stop_ = false;
};

absl::Status Run::Setup() {
  DTRAIN_ASSIGN_OR_RETURN(
      p_, AssembleRun(o_, world_, backend_,
                      {{context_.log,
                        context_.log_is_terminal,
                        context_.start,
                        {world_.rank, world_.world_size, world_.local_rank,
                         o_.model.name, std::string(backend_.name())}},
                       context_.cuda_device,
                       context_.stop_requested,
                       context_.elastic}));
  outputs_.emplace(o_, world_.rank, p_);
  recorder_ = p_.recorder.get();
  model_ = p_.model.get();
  train_loader_ = p_.train_loader.get();
  global_step_ = p_.start.global_step;
  best_top1_ = p_.start.best_top1;
  committed_sampler_ = train_loader_->state();
  committed_step_ = global_step_;
  return absl::OkStatus();
}

absl::StatusOr<bool> Run::TrainEpoch(int64_t epoch, EpochMetrics* m) {
  model_->train();
  const int64_t per_step = o_.optim.accumulate_steps;
  const int64_t batches_left = train_loader_->batches_left();
  // Resumed inside an epoch: checkpoints fall on step boundaries.
  const int64_t first_step = (p_.batches_per_epoch - batches_left) / per_step;
  const int64_t steps =
      std::min((batches_left + per_step - 1) / per_step,
               o_.optim.max_steps > 0 ? o_.optim.max_steps - global_step_
                                      : std::numeric_limits<int64_t>::max());
  recorder_->StartEpoch(epoch, steps,
                        p_.schedule->LearningRate(epoch, first_step));
  // Uneven inputs: out of batches, this rank shadows the others' steps (DDP,
  // then the optimizer step, then the stop vote, as a step runs them) until
  // every rank is; shadowed steps are neither recorded nor counted as
  // trained samples.
  int64_t s = 0;
  StepShadow step_shadow([&]() -> absl::Status {
    DTRAIN_RETURN_IF_ERROR(p_.schedule->SetStep(epoch, first_step + s));
    DTRAIN_RETURN_IF_ERROR(p_.step->ShadowStep());
    ++s;
    ++global_step_;
    return absl::OkStatus();
  });
  std::unique_ptr<ddp::Join> join;
  if (Uneven()) {
    ddp::JoinOptions options;
    options.device = p_.device;
    options.timeout = o_.launch.timeout;
    options.divide_by_initial_world_size = o_.data.divide_by_initial_world_size;
    DTRAIN_ASSIGN_OR_RETURN(join, ddp::Join::Create({p_.ddp.get(), &step_shadow,
                                                     p_.stop_vote.get()},
                                                    backend_, options));
  }
  for (; s < steps && train_loader_->batches_left() > 0; ++s) {
    DTRAIN_RETURN_IF_ERROR(p_.schedule->SetStep(epoch, first_step + s));
    DTRAIN_ASSIGN_OR_RETURN(const StepOutcome outcome, Step(epoch, s));
    committed_sampler_ = train_loader_->state();
    committed_step_ = global_step_ + 1;
    if (context_.elastic != nullptr && context_.elastic->first_step_committed &&
        !first_step_reported_) {
      first_step_reported_ = true;
      context_.elastic->first_step_committed(committed_step_);
    }
    // The vote's round trip overlaps the step's reporting: a signal that
    // arrived during this step stops the run at its end, not a step later.
    p_.stop_vote->Issue();
    ++global_step_;
    DTRAIN_RETURN_IF_ERROR(recorder_->Step(
        Record(outcome, p_.schedule->LearningRate(epoch, first_step + s))));
    DTRAIN_ASSIGN_OR_RETURN(signal_stop_, p_.stop_vote->Collect());
    if (signal_stop_) break;
    if (p_.stop_vote->regroup()) {
      if (context_.elastic != nullptr) context_.elastic->regrouped = true;
      return absl::AbortedError(absl::StrCat(
          "stopped after step ", global_step_, " to regroup with joiners"));
    }
    if (o_.checkpoint.checkpoint_every_steps > 0 &&
        global_step_ % o_.checkpoint.checkpoint_every_steps == 0 &&
        train_loader_->batches_left() > 0) {
      // In a Join epoch the ranks reach this line at different steps.
      DTRAIN_RETURN_IF_ERROR(Checkpoint(train_loader_->state(), /*best=*/false,
                                        /*together=*/!Uneven()));
    }
  }
  if (join != nullptr) {
    DTRAIN_RETURN_IF_ERROR(join->JoinAndShadow().status());
    // A signal on a rank that had joined stops every rank too.
    if (p_.stop_vote->ShadowedStop()) signal_stop_ = true;
  }
  const LossScaler* scaler = p_.step->loss_scaler();
  DTRAIN_ASSIGN_OR_RETURN(
      *m, recorder_->EndEpoch(p_.schedule->LearningRate(epoch, first_step),
                              scaler != nullptr
                                  ? absl::make_optional(scaler->scale())
                                  : absl::nullopt,
                              global_step_));
  // Stopped inside the epoch (max_steps, a signal): the checkpoint keeps the
  // position.
  return ((o_.optim.max_steps > 0 && global_step_ >= o_.optim.max_steps) ||
          signal_stop_) &&
         train_loader_->batches_left() > 0;
}

absl::StatusOr<StepOutcome> Run::Step(int64_t epoch, int64_t s) {
  const int64_t micro_batches =
      std::min(o_.optim.accumulate_steps, train_loader_->batches_left());
  DTRAIN_RETURN_IF_ERROR(p_.step->Begin(micro_batches));
  for (int64_t j = 0; j < micro_batches; ++j) {
    const absl::Time wait = absl::Now();
    DTRAIN_ASSIGN_OR_RETURN(absl::optional<data::Batch> batch,
                            train_loader_->Next());
    if (!batch.has_value()) {
      return absl::InternalError(absl::StrCat("epoch ", epoch, " step ", s,
                                              ": the loader ended early"));
    }
    recorder_->DataWait(wait, absl::Now());
    at::Tensor images = batch->images.to(p_.device, /*non_blocking=*/true);
    at::Tensor labels = batch->labels.to(p_.device, /*non_blocking=*/true);
    // One seed per micro-batch: with accumulate_steps 1, per step.
    torch::manual_seed(MicroBatchSeed(
        o_.seed, world_.rank, global_step_ * o_.optim.accumulate_steps + j));
    if (absl::Status st = p_.step->MicroBatch(images, labels); !st.ok()) {
      return absl::Status(
          st.code(), absl::StrCat("epoch ", epoch, " step ", s, " micro-batch ",
                                  j, ": ", st.message()));
    }
  }
  return p_.step->Finish();
}

StepRecord Run::Record(const StepOutcome& outcome, double lr) const {
  StepRecord r;
  r.examples = outcome.examples;
  r.loss_sum = outcome.loss_sum;
  r.correct1 = outcome.correct1;
  r.correct5 = outcome.correct5;
  r.grad_norm = outcome.grad_norm;
  r.skipped = outcome.skipped;
  if (o_.parallel.sync_gradients) r.ddp = &p_.ddp->last_step_stats();
  r.global_step = global_step_;
  r.learning_rate = lr;
  r.phases = &outcome.phases;
  return r;
}

absl::Status Run::Validate(EpochMetrics* m) {
  const absl::Time start = absl::Now();
  EvaluationOptions options;
  if (o_.parallel.sync_gradients)
    options.stop_requested = context_.stop_requested;
  DTRAIN_ASSIGN_OR_RETURN(
      const Scores scores,
      EvaluateOnRanks(*p_.model, *p_.val_loader, p_.data->val->size(), *p_.sync,
                      options));
  m->val_loss = scores.loss;
  m->val_top1 = scores.top1;
  m->val_top5 = scores.top5;
  m->val_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return absl::OkStatus();
}

absl::Status Run::ValidateEpoch(const data::SamplerState& next, int64_t epoch,
                                EpochMetrics* m) {
  if (o_.skip_validation || signal_stop_) return absl::OkStatus();
  absl::Status validated = Validate(m);
  if (absl::IsCancelled(validated)) {
    signal_stop_ = true;
    Say(absl::StrCat("validation of epoch ", epoch + 1,
                     " stopped by a signal; it is not repeated on --resume "
                     "(--evaluate gives it)"));
    return absl::OkStatus();
  }
  DTRAIN_RETURN_IF_ERROR(validated);
  const bool best = *m->val_top1 > best_top1_;
  best_top1_ = std::max(best_top1_, *m->val_top1);
  Say(absl::StrFormat(
      " * validation: loss %.4f  Prec@1 %.3f  Prec@5 %.3f  (best Prec@1 "
      "%.3f, %.1f s)",
      *m->val_loss, *m->val_top1, *m->val_top5, best_top1_, m->val_seconds));
  // Again with the new best accuracy in it, and as best.dtc.
  if (best) DTRAIN_RETURN_IF_ERROR(Checkpoint(next, best));
  return absl::OkStatus();
}

absl::StatusOr<TrainResult> Run::Evaluate() {
  if (!Resumed() && o_.model.init_state_dict.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("--evaluate: no checkpoint in ",
                     o_.checkpoint.checkpoint_dir, " to evaluate"));
  }
  EpochMetrics m;
  m.epoch = p_.start.epoch;
  DTRAIN_RETURN_IF_ERROR(Validate(&m));
  best_top1_ = *m.val_top1;
  const std::string& from = recorder_->metrics().resumed_from;
  Say(absl::StrFormat(
      " * evaluation of %s: loss %.4f  Prec@1 %.3f  Prec@5 %.3f  (%.1f s)",
      from.empty() ? o_.model.init_state_dict : from, *m.val_loss, *m.val_top1,
      *m.val_top5, m.val_seconds));
  recorder_->metrics().epochs.push_back(m);
  // --evaluate --save_state_dict: also turns a checkpoint into weights.
  DTRAIN_RETURN_IF_ERROR(outputs_->StateDict(global_step_));
  DTRAIN_RETURN_IF_ERROR(recorder_->WriteMetrics(best_top1_, global_step_));
  return TrainResult{recorder_->metrics(), p_.model};
}

absl::StatusOr<TrainResult> Run::Execute() {
  DTRAIN_RETURN_IF_ERROR(Setup());
  if (o_.evaluate) return Evaluate();
  const bool done =
      p_.start.epoch >= *o_.optim.epochs ||
      (o_.optim.max_steps > 0 && global_step_ >= o_.optim.max_steps);
  if (done && Resumed()) {
    Say(absl::StrCat(
        "nothing left to train: the checkpoint is at epoch ", p_.start.epoch,
        " of ", *o_.optim.epochs, ", step ", global_step_,
        o_.optim.max_steps > 0
            ? absl::StrCat(" (--max_steps=", o_.optim.max_steps, ")")
            : "",
        "; raise --epochs or --max_steps to train further"));
  }
  if (!done && !o_.skip_validation && o_.num_sanity_val_steps > 0) {
    DTRAIN_ASSIGN_OR_RETURN(const std::string line,
                            SanityCheck(*p_.model, *p_.val_loader, *p_.sync,
                                        o_.num_sanity_val_steps));
    Say(line);
  }
  for (int64_t epoch = p_.start.epoch; epoch < *o_.optim.epochs; ++epoch) {
    if (o_.optim.max_steps > 0 && global_step_ >= o_.optim.max_steps) break;
    train_loader_->SetEpoch(epoch);
    DTRAIN_RETURN_IF_ERROR(p_.schedule->SetEpoch(epoch));
    Say(absl::StrFormat("Begin training epoch %d/%d (lr %g)", epoch + 1,
                        *o_.optim.epochs, p_.schedule->LearningRate(epoch)));
    EpochMetrics m;
    DTRAIN_ASSIGN_OR_RETURN(const bool stopped, TrainEpoch(epoch, &m));
    // The epoch's checkpoint comes before its validation: a damaged
    // validation file or a signal during validation then costs no training.
    data::SamplerState next = train_loader_->state();
    if (!stopped) {
      next.epoch = epoch + 1;
      next.position = next.start = 0;
    }
    committed_sampler_ = next;
    DTRAIN_RETURN_IF_ERROR(Checkpoint(next, /*best=*/false));
    DTRAIN_RETURN_IF_ERROR(ValidateEpoch(next, epoch, &m));
    recorder_->metrics().epochs.push_back(m);
    DTRAIN_RETURN_IF_ERROR(recorder_->WriteMetrics(best_top1_, global_step_));
    if (signal_stop_) {
      DTRAIN_RETURN_IF_ERROR(WriteTrace(o_.launch.timeout));
      return absl::CancelledError(absl::StrCat(
          "stopped by a signal at step ", global_step_,
          !o_.checkpoint.checkpoint_dir.empty()
              ? absl::StrCat("; checkpoint in ", o_.checkpoint.checkpoint_dir,
                             " (continue with --resume)")
              : "; no --checkpoint_dir, nothing saved"));
    }
    if (stopped) {
      Say(absl::StrCat("stopped at --max_steps=", o_.optim.max_steps));
      break;
    }
  }
  return Finish();
}

absl::Status Run::RecordMemory() {
  const torch::optim::Optimizer& stepped =
      p_.zero != nullptr ? p_.zero->optimizer() : *p_.optimizer;
  DTRAIN_ASSIGN_OR_RETURN(const int64_t state, OptimizerStateBytes(stepped));
  // Without /proc/self/smaps_rollup (not Linux) PSS is 0: not measured.
  const base::ProcessMemory memory =
      base::ReadProcessMemory().value_or(base::ProcessMemory{});
  const int world = world_.world_size;
  // Row r of each: rank r's figure, as a sum over zeros (exact below 2^53).
  std::vector<double> values(3 * world, 0.0);
  values[world_.rank] = static_cast<double>(state);
  values[world + world_.rank] = static_cast<double>(memory.peak_rss_bytes);
  values[2 * world + world_.rank] = static_cast<double>(memory.pss_bytes);
  DTRAIN_ASSIGN_OR_RETURN(values,
                          p_.sync->AllReduce(values, backend::ReduceOp::kSum));
  RunMetrics& m = recorder_->metrics();
  m.optimizer_state_bytes.assign(values.begin(), values.begin() + world);
  m.peak_rss_bytes.assign(values.begin() + world, values.begin() + 2 * world);
  m.pss_bytes.assign(values.begin() + 2 * world, values.end());
  return absl::OkStatus();
}

absl::StatusOr<TrainResult> Run::Finish() {
  // Post-local SGD's ranks agree only right after an averaging.
  const bool identical =
      o_.parallel.sync_gradients &&
      (p_.averager == nullptr || p_.averager->averaged_last());
  if (identical && world_.world_size > 1) {
    std::vector<std::pair<std::string, at::Tensor>> parameters;
    for (const auto& p : model_->named_parameters()) {
      parameters.emplace_back(p.key(), p.value());
    }
    DTRAIN_RETURN_IF_ERROR(p_.sync->CheckIdentical(parameters));
    recorder_->metrics().ranks_identical = true;
  }
  DTRAIN_RETURN_IF_ERROR(RecordMemory());
  DTRAIN_RETURN_IF_ERROR(outputs_->StateDict(global_step_));
  DTRAIN_RETURN_IF_ERROR(recorder_->WriteMetrics(best_top1_, global_step_));
  DTRAIN_RETURN_IF_ERROR(WriteTrace(o_.launch.timeout));
  return TrainResult{recorder_->metrics(), p_.model};
}

absl::Status Run::WriteTrace(absl::Duration timeout) {
  TraceMergeSetup setup;
  setup.rank = world_.rank;
  setup.world_size = world_.world_size;
  setup.store = world_.store.get();
  setup.timeout = timeout;
  absl::Status st = recorder_->WriteTrace(std::move(setup));
  // Rank 0 owns the file; another rank's training went well whatever
  // became of its part, which rank 0's file then names missing.
  if (!st.ok() && world_.rank != 0) {
    if (context_.log != nullptr) {
      *context_.log << base::WithRank(world_.rank, st).message() << std::endl;
    }
    return absl::OkStatus();
  }
  return st;
}

void Run::TraceFailure(const absl::Status& failure) {
  // After a graceful stop or a failed end-of-run merge, the trace was merged.
  if (recorder_ == nullptr || o_.report.trace.empty() ||
      recorder_->trace_written()) {
    return;
  }
  // Peers blocked on this rank learn of the failure now (Gloo: when this
  // process closes its connections), not after the merge's wait.
  backend_.Abort(failure);
  recorder_->Failed(base::WithRank(world_.rank, failure).message());
  // A dead rank never sends its part: rank 0 names it missing.
  if (absl::Status st = WriteTrace(std::min(o_.launch.timeout, kFailureWait));
      !st.ok()) {
    Say(absl::StrCat("no trace: ", st.message()));
  }
}

void Run::HandOver(ElasticHandover* out) const {
  if (p_.data.has_value()) out->data = p_.data;
  out->committed_bytes.clear();
  out->committed_step = -1;
  if (!committed_sampler_.has_value() || p_.ddp == nullptr) return;
  TrainingState state;
  state.epoch = committed_sampler_->epoch;
  state.sampler = *committed_sampler_;
  state.global_step = committed_step_;
  state.best_top1 = best_top1_;
  state.model_name = o_.model.name;
  state.optimizer_name = *o_.optim.optimizer;
  state.seed = o_.seed;
  // The shared state only: a generation of another size starts the per-rank
  // state fresh, as a resume at another world size does.
  HookState hook;
  hook.name = p_.ddp->comm_hook().name();
  hook.tensors = p_.ddp->comm_hook().State();
  absl::StatusOr<std::string> bytes =
      EncodeCheckpoint(*p_.model, *p_.optimizer, state, hook);
  if (!bytes.ok()) return;
  out->committed_bytes = *std::move(bytes);
  out->committed_step = committed_step_;
}

}  // namespace

absl::StatusOr<TrainResult> Train(const TrainOptions& options,
                                  const rendezvous::World& world,
                                  backend::Backend& backend,
                                  const TrainContext& context) {
  Run run(options, world, backend, context);
  absl::StatusOr<TrainResult> result = run.Execute();
  if (!result.ok()) {
    run.TraceFailure(result.status());
    if (context.elastic != nullptr) run.HandOver(context.elastic);
    return base::WithRank(world.rank, result.status());
  }
  return result;
}

}  // namespace dtrain::trainer
