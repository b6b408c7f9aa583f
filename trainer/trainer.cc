#include "trainer/trainer.h"

#include <ATen/Functions.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <torch/cuda.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/compute_threads.h"
#include "base/rank_status.h"
#include "base/status_macros.h"
#include "base/torch_guard.h"
#include "data/distributed_sampler.h"
#include "data/loader.h"
#include "dist/ddp/ddp.h"
#include "dist/ddp/sync_batch_norm.h"
#include "models/registry.h"
#include "models/state_dict/state_dict.h"
#include "optim/adadelta.h"
#include "optim/lr_schedule.h"
#include "trainer/amp.h"
#include "trainer/checkpoint/checkpoint.h"
#include "trainer/checkpoint/checkpoint_dir.h"
#include "trainer/report/ddp_timeline.h"
#include "trainer/evaluation.h"
#include "trainer/report/live_report.h"
#include "trainer/report/meters.h"
#include "trainer/report/progress.h"
#include "trainer/rank_sync.h"
#include "trainer/run_parts.h"
#include "trainer/train_step.h"
#include "trainer/training_data.h"

namespace dtrain::trainer {
namespace {

using backend::ReduceOp;

// The generator state for one step's random draws (dropout): a function of
// the seed, the rank and the step only, so that a resumed run draws what the
// uninterrupted one did. SplitMix64's finaliser decorrelates the inputs.
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
      : o_(o),
        world_(world),
        backend_(backend),
        context_(context),
        rank0_(world.rank == 0) {}

  absl::StatusOr<TrainResult> Execute();

 private:
  absl::Status Setup();
  absl::Status Resume();
  absl::StatusOr<bool> TrainEpoch(int64_t epoch, EpochMetrics* metrics);
  // The validation pass; kCancelled when a signal stopped it.
  absl::Status Validate(EpochMetrics* metrics);
  // A few validation batches before the first step (--num_sanity_val_steps).
  absl::Status SanityCheckValidation();
  // Waits for the vote issued at the end of a step: whether any rank was
  // asked to stop. Without gradient sync each rank answers for itself.
  absl::Status CollectStopVote();
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
  // The run-level fields of metrics_ (best top-1, steps, wall time).
  void UpdateRunTotals();
  absl::Status WriteMetrics();
  void Say(const std::string& line) {
    if (rank0_ && progress_ != nullptr) progress_->Message(line);
  }

  const TrainOptions& o_;
  const rendezvous::World& world_;
  backend::Backend& backend_;
  const TrainContext& context_;
  const bool rank0_;

  c10::Device device_{c10::kCPU};
  absl::optional<TrainingData> data_;
  std::shared_ptr<models::Model> model_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  absl::optional<optim::LrSchedule> schedule_;
  std::unique_ptr<ddp::DistributedDataParallel> ddp_;
  std::unique_ptr<TrainStep> step_;
  std::unique_ptr<data::DataLoader> train_loader_;
  std::unique_ptr<data::DataLoader> val_loader_;
  absl::optional<CheckpointDir> checkpoints_;
  std::unique_ptr<ProgressPrinter> progress_;
  std::unique_ptr<LiveReport> live_;

  int64_t start_epoch_ = 0;
  // Loader batches in a whole epoch, and optimizer steps (accumulate_steps
  // batches each, fewer for the last).
  int64_t batches_per_epoch_ = 0;
  int64_t steps_per_epoch_ = 0;
  int64_t global_step_ = 0;
  double best_top1_ = 0;
  bool first_step_done_ = false;
  // Every rank loaded a checkpoint (--resume found one).
  bool resumed_ = false;
  // The ranks agreed to stop at this step boundary (a signal).
  bool signal_stop_ = false;
  // The stop vote issued at the end of the last step, not yet waited for.
  std::shared_ptr<backend::Work> stop_vote_;
  // Carries the stop vote; undefined when there is none.
  at::Tensor stop_flag_;
  RunMetrics metrics_;
};

absl::Status Run::Setup() {
  DTRAIN_RETURN_IF_ERROR(trainer::Validate(o_));
  // Before anything takes time: a path that cannot be written would
  // otherwise fail only after training, losing the weights.
  DTRAIN_RETURN_IF_ERROR(CheckOutputPaths(o_, world_.rank));
  base::SetComputeThreads(o_.intra_op_threads);
  progress_ = std::make_unique<ProgressPrinter>(
      o_.progress, context_.log_is_terminal, o_.print_freq,
      context_.log != nullptr ? *context_.log : std::cerr);
  DTRAIN_ASSIGN_OR_RETURN(c10::Device device,
                          TrainingDevice(o_, context_.cuda_device));
  device_ = device;
  DTRAIN_ASSIGN_OR_RETURN(const Precision precision, ParsePrecision(o_.amp));
  DTRAIN_RETURN_IF_ERROR(CheckPrecision(precision, device_));
  // Before any collective: a busy port fails this rank at once.
  DTRAIN_ASSIGN_OR_RETURN(
      live_,
      LiveReport::Create(o_, {world_.rank, world_.world_size, world_.local_rank,
                              o_.model, std::string(backend_.name())}));
  if (const std::string url = live_->metrics_url(); !url.empty()) {
    const std::string line =
        absl::StrCat("[rank ", world_.rank, "] live metrics on ", url);
    if (rank0_) {
      metrics_.metrics_url = url;
      Say(line);
    } else if (context_.log != nullptr) {
      *context_.log << line << std::endl;
    }
  }

  DTRAIN_ASSIGN_OR_RETURN(TrainingData data, LoadTrainingData(o_));
  data_ = std::move(data);
  Say(absl::StrCat("data: ", data_->description));

  models::ModelConfig config;
  config.num_classes = data_->num_classes;
  config.in_channels = data_->input_shape[0];
  config.image_size = data_->input_shape[1];
  config.small_input_stem = o_.small_input_stem;
  if (o_.sync_batchnorm && world_.world_size > 1) {
    ddp::SyncBatchNormOptions sync;
    sync.timeout = o_.timeout;
    config.norm_layer = ddp::SyncBatchNormLayers(backend_, sync);
  }
  // Every rank builds the same initial weights; DDP broadcasts rank 0's all
  // the same, which also covers models whose construction is not seeded.
  torch::manual_seed(o_.seed);
  DTRAIN_ASSIGN_OR_RETURN(std::shared_ptr<models::Model> model,
                          models::CreateModel(o_.model, config));
  model_ = std::move(model);
  metrics_.sync_batchnorm_layers = ddp::LabelSyncBatchNorms(*model_);
  if (o_.sync_batchnorm && !models::FindModel(o_.model)->batch_norm) {
    Say(absl::StrCat("--sync_batchnorm: ", o_.model,
                     " has no batch norm layers; it trains unchanged, as "
                     "PyTorch's convert_sync_batchnorm leaves it"));
  }
  model_->to(device_);
  if (!o_.init_state_dict.empty()) {
    models::state_dict::LoadOptions load;
    load.strict = o_.init_state_dict_strict;
    load.exclude = o_.init_state_dict_exclude;
    load.strict_flag = "--init_state_dict_strict";
    load.exclude_flag = "--init_state_dict_exclude";
    absl::StatusOr<models::state_dict::LoadReport> loaded =
        models::state_dict::LoadStateDict(o_.init_state_dict, *model_, load);
    if (!loaded.ok()) {
      return absl::Status(
          loaded.status().code(),
          absl::StrCat("--init_state_dict: ", loaded.status().message()));
    }
    Say(absl::StrCat("weights from ", o_.init_state_dict, ": ",
                     loaded->Summary()));
  }

  DTRAIN_ASSIGN_OR_RETURN(optimizer_, MakeOptimizer(o_, model_->parameters()));

  const bool pin = device_.is_cuda();
  DTRAIN_ASSIGN_OR_RETURN(
      train_loader_,
      MakeLoader(data_->train, data_->train_transforms, o_, world_,
                 /*shuffle=*/true, pin));
  DTRAIN_ASSIGN_OR_RETURN(
      val_loader_, MakeLoader(data_->val, data_->val_transforms, o_, world_,
                              /*shuffle=*/false, pin));
  batches_per_epoch_ = train_loader_->batches_left();
  steps_per_epoch_ = std::max<int64_t>(
      1, (batches_per_epoch_ + o_.accumulate_steps - 1) / o_.accumulate_steps);

  // Created before a checkpoint is loaded, so that the base rates are the
  // configured ones, not a decayed rate from the checkpoint.
  optim::LrScheduleOptions lr;
  DTRAIN_ASSIGN_OR_RETURN(lr.kind, optim::ParseLrScheduleKind(o_.lr_schedule));
  lr.step = {o_.lr_step_epochs, o_.lr_gamma};
  lr.epochs = *o_.epochs;
  lr.warmup_epochs = o_.warmup_epochs;
  lr.steps_per_epoch = steps_per_epoch_;
  DTRAIN_ASSIGN_OR_RETURN(schedule_,
                          optim::LrSchedule::Create(*optimizer_, lr));

  if (!o_.checkpoint_dir.empty() && rank0_) {
    DTRAIN_ASSIGN_OR_RETURN(
        checkpoints_,
        CheckpointDir::Open(o_.checkpoint_dir, o_.keep_checkpoints));
  }
  if (o_.resume) DTRAIN_RETURN_IF_ERROR(Resume());

  ddp::DdpOptions d;
  d.bucket_cap_bytes = static_cast<int64_t>(o_.bucket_cap_mb * (1 << 20));
  d.first_bucket_cap_bytes =
      std::min(d.first_bucket_cap_bytes, d.bucket_cap_bytes);
  // Without gradient sync nothing else may communicate either: the run
  // measures what the machine does with no communication at all.
  d.broadcast_buffers = o_.sync_gradients;
  d.timeout = o_.timeout;
  d.fp16_compression = o_.fp16_allreduce;
  DTRAIN_ASSIGN_OR_RETURN(
      ddp_, ddp::DistributedDataParallel::Create(model_, backend_, d));
  ddp_->set_gradient_sync(o_.sync_gradients);
  StepOptions step;
  step.accumulate_steps = o_.accumulate_steps;
  step.precision = precision;
  step.clip_grad_norm = o_.clip_grad_norm;
  step_ =
      std::make_unique<TrainStep>(step, *model_, *ddp_, *optimizer_, device_);
  // One tensor for every step's stop vote (see TrainEpoch).
  if (context_.stop_requested != nullptr && o_.sync_gradients) {
    stop_flag_ =
        at::zeros({1}, at::TensorOptions().dtype(at::kInt).device(device_));
  }

  metrics_.options = o_;
  metrics_.world_size = world_.world_size;
  metrics_.backend = std::string(backend_.name());
  metrics_.backend_layout = backend_.layout();
  metrics_.device = device_.str();
  metrics_.data = data_->description;
  metrics_.launch_source = std::string(world_.launch.source_name());
  metrics_.parameters = models::NumParameters(*model_);
  Say(absl::StrFormat(
      "%s: %d parameters, %s, world size %d (%s), batch %d per process "
      "(global %d%s), %d buckets%s%s%s",
      o_.model, metrics_.parameters, device_.str(), world_.world_size,
      metrics_.backend, *o_.batch_size, *o_.batch_size * world_.world_size,
      o_.accumulate_steps > 1
          ? absl::StrCat(
                ", ", o_.accumulate_steps, " per step: effective ",
                *o_.batch_size * world_.world_size * o_.accumulate_steps)
          : "",
      ddp_->buckets().size(), o_.fp16_allreduce ? " (float16 on the wire)" : "",
      precision != Precision::kFloat32
          ? absl::StrCat(", autocast ", PrecisionName(precision))
          : "",
      o_.sync_gradients ? "" : ", gradient sync OFF (no-communication bound)"));
  return absl::OkStatus();
}

absl::Status Run::Resume() {
  std::string bytes;
  absl::Status found = absl::OkStatus();
  if (rank0_) {
    absl::StatusOr<CheckpointDir::Found> latest = checkpoints_->Latest();
    if (latest.ok()) {
      for (const std::string& skipped : latest->skipped)
        Say(absl::StrCat("skipping checkpoint ", skipped));
      bytes = std::move(latest->bytes);
      metrics_.resumed_from = latest->path;
    } else {
      found = latest.status();
    }
  }
  // Whether rank 0 found one, and then its bytes: every rank decides alike.
  std::vector<double> have = {rank0_ && found.ok() ? 1.0 : 0.0};
  DTRAIN_ASSIGN_OR_RETURN(
      std::vector<double> any,
      AllReduceValues(backend_, have, ReduceOp::kMax, device_, o_.timeout));
  if (any[0] == 0) {
    if (found.code() != absl::StatusCode::kNotFound) return found;
    Say(absl::StrCat("no checkpoint in ", o_.checkpoint_dir,
                     ": starting from the beginning"));
    return absl::OkStatus();
  }
  resumed_ = true;
  DTRAIN_RETURN_IF_ERROR(
      BroadcastBytes(backend_, 0, &bytes, found, device_, o_.timeout));
  DTRAIN_ASSIGN_OR_RETURN(
      TrainingState state,
      DecodeCheckpoint(bytes, *model_, *optimizer_, o_.model, *o_.optimizer));
  start_epoch_ = state.epoch;
  global_step_ = state.global_step;
  best_top1_ = state.best_top1;
  // Evaluation needs the weights only, on any number of ranks.
  if (o_.evaluate) {
    Say(absl::StrCat("loaded ", metrics_.resumed_from, " (step ", global_step_,
                     ")"));
    return absl::OkStatus();
  }
  DTRAIN_RETURN_IF_ERROR(train_loader_->Restore(state.sampler));
  const data::DistributedSampler& sampler = train_loader_->sampler();
  std::string how;
  if (state.sampler.num_replicas != world_.world_size) {
    how = sampler.start() == 0
              ? absl::StrCat("; saved by ", state.sampler.num_replicas,
                             " processes at an epoch boundary: continuing "
                             "exactly as a run of ",
                             world_.world_size, " would")
              : absl::StrCat(
                    "; saved by ", state.sampler.num_replicas,
                    " processes inside epoch ", state.sampler.epoch, ": the ",
                    data_->train->size() - sampler.start(),
                    " examples it had left are re-partitioned over ",
                    world_.world_size,
                    " processes (each seen once; its batches differ from an "
                    "uninterrupted run's)");
  }
  Say(absl::StrCat("resumed from ", metrics_.resumed_from, ": epoch ",
                   sampler.epoch(), ", example ", sampler.position(), " of ",
                   sampler.num_samples(), " per rank, step ", global_step_,
                   how));
  return absl::OkStatus();
}

absl::Status Run::SaveCheckpoint(const data::SamplerState& sampler,
                                 int64_t epoch, bool best) {
  if (!rank0_ || !checkpoints_) return absl::OkStatus();
  DTRAIN_RETURN_IF_ERROR(ConfirmLastStep());
  TrainingState state;
  state.epoch = epoch;
  state.sampler = sampler;
  state.global_step = global_step_;
  state.best_top1 = best_top1_;
  state.model_name = o_.model;
  state.optimizer_name = *o_.optimizer;
  state.seed = o_.seed;
  DTRAIN_ASSIGN_OR_RETURN(std::string bytes,
                          EncodeCheckpoint(*model_, *optimizer_, state));
  std::vector<std::string> warnings;
  DTRAIN_ASSIGN_OR_RETURN(std::string path,
                          checkpoints_->Save(global_step_, bytes, &warnings));
  for (const std::string& warning : warnings) Say(warning);
  if (best) {
    DTRAIN_ASSIGN_OR_RETURN(std::string best_path,
                            checkpoints_->SaveBest(bytes));
  }
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
  if (!rank0_ || o_.save_state_dict.empty()) return absl::OkStatus();
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

absl::StatusOr<bool> Run::TrainEpoch(int64_t epoch, EpochMetrics* m) {
  model_->train();
  AverageMeter batch_time, data_time, loss_meter, top1, top5;
  std::vector<double> step_seconds;
  double exposed = 0, grad_norm_sum = 0;
  DdpTimelineAccumulator timeline;
  int64_t correct1 = 0, correct5 = 0, examples = 0, skipped = 0;
  double loss_sum = 0;
  const int64_t per_step = o_.accumulate_steps;
  const int64_t limit = o_.max_steps > 0 ? o_.max_steps - global_step_
                                         : std::numeric_limits<int64_t>::max();
  const int64_t batches_left = train_loader_->batches_left();
  // Resumed inside an epoch: checkpoints fall on step boundaries.
  const int64_t first_step = (batches_per_epoch_ - batches_left) / per_step;
  const int64_t steps =
      std::min((batches_left + per_step - 1) / per_step, limit);
  progress_->StartEpoch(epoch, *o_.epochs, steps);
  const absl::Time epoch_start = absl::Now();
  live_->StartEpoch(epoch, schedule_->LearningRate(epoch, first_step),
                    epoch_start);
  absl::Time end = epoch_start;
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t micro_batches =
        std::min(per_step, train_loader_->batches_left());
    if (micro_batches == 0) break;
    DTRAIN_RETURN_IF_ERROR(schedule_->SetStep(epoch, first_step + s));
    DTRAIN_RETURN_IF_ERROR(step_->Begin(micro_batches));
    double waited = 0;
    for (int64_t j = 0; j < micro_batches; ++j) {
      const absl::Time wait = absl::Now();
      DTRAIN_ASSIGN_OR_RETURN(absl::optional<data::Batch> batch,
                              train_loader_->Next());
      if (!batch.has_value()) {
        return absl::InternalError(absl::StrCat("epoch ", epoch, " step ", s,
                                                ": the loader ended early"));
      }
      const double wait_seconds = absl::ToDoubleSeconds(absl::Now() - wait);
      waited += wait_seconds;
      data_time.Update(wait_seconds);
      at::Tensor images = batch->images.to(device_, /*non_blocking=*/true);
      at::Tensor labels = batch->labels.to(device_, /*non_blocking=*/true);
      // One seed per micro-batch: with accumulate_steps 1, per step.
      torch::manual_seed(
          StepSeed(o_.seed, world_.rank, global_step_ * per_step + j));
      if (absl::Status st = step_->MicroBatch(images, labels); !st.ok()) {
        return absl::Status(
            st.code(), absl::StrCat("epoch ", epoch, " step ", s,
                                    " micro-batch ", j, ": ", st.message()));
      }
    }
    DTRAIN_ASSIGN_OR_RETURN(const StepOutcome outcome, step_->Finish());
    // The stop vote goes out as soon as the step is done, and its round trip
    // overlaps the step's reporting: a signal that arrived during this step
    // stops the run at its end, not a step later.
    if (stop_flag_.defined()) {
      stop_flag_.fill_(context_.stop_requested->load() ? 1 : 0);
      stop_vote_ = backend_.AllReduce(stop_flag_, ReduceOp::kMax, "stop vote");
    }
    ++global_step_;
    if (!first_step_done_) {
      first_step_done_ = true;
      metrics_.startup_seconds =
          absl::ToDoubleSeconds(absl::Now() - context_.start);
    }
    const double step_exposed =
        o_.sync_gradients ? absl::ToDoubleSeconds(
                                ddp_->last_step_stats().exposed_communication)
                          : 0.0;
    exposed += step_exposed;
    if (o_.sync_gradients) timeline.Add(ddp_->last_step_stats());
    if (outcome.grad_norm.has_value()) grad_norm_sum += *outcome.grad_norm;
    if (outcome.skipped) ++skipped;

    const int64_t n = outcome.examples;
    const double loss_value = outcome.loss_sum / std::max<int64_t>(1, n);
    loss_sum += outcome.loss_sum;
    correct1 += outcome.correct1;
    correct5 += outcome.correct5;
    examples += n;
    loss_meter.Update(loss_value, n);
    top1.Update(100.0 * outcome.correct1 / std::max<int64_t>(1, n), n);
    top5.Update(100.0 * outcome.correct5 / std::max<int64_t>(1, n), n);
    const absl::Time now = absl::Now();
    batch_time.Update(absl::ToDoubleSeconds(now - end));
    // The step's own time: without its waits for the loader.
    step_seconds.push_back(absl::ToDoubleSeconds(now - end) - waited);
    end = now;
    DTRAIN_RETURN_IF_ERROR(
        live_->Step(s,
                    {step_seconds.back(), waited, step_exposed, n, loss_value,
                     /*samples_per_second=*/0, global_step_,
                     schedule_->LearningRate(epoch, first_step + s)},
                    now));
    if (rank0_) {
      BatchReport report;
      report.batch = s;
      report.batch_time = &batch_time;
      report.data_time = &data_time;
      report.loss = &loss_meter;
      report.top1 = &top1;
      report.top5 = &top5;
      report.samples_per_second = static_cast<double>(examples) *
                                  world_.world_size /
                                  absl::ToDoubleSeconds(now - epoch_start);
      progress_->Batch(report);
    }
    DTRAIN_RETURN_IF_ERROR(CollectStopVote());
    if (signal_stop_) break;
    if (o_.checkpoint_every_steps > 0 &&
        global_step_ % o_.checkpoint_every_steps == 0 &&
        train_loader_->batches_left() > 0) {
      DTRAIN_RETURN_IF_ERROR(
          SaveCheckpoint(train_loader_->state(), epoch, /*best=*/false));
    }
  }
  progress_->EndEpoch();
  // Stopped inside the epoch (max_steps, a signal): the checkpoint keeps the
  // position.
  const bool stopped =
      ((o_.max_steps > 0 && global_step_ >= o_.max_steps) || signal_stop_) &&
      train_loader_->batches_left() > 0;
  const double seconds = absl::ToDoubleSeconds(end - epoch_start);

  // Exact totals over ranks, and the slowest rank's times.
  DTRAIN_ASSIGN_OR_RETURN(
      const Scores scores,
      ScoresOverRanks(backend_, device_, o_.timeout, loss_sum, correct1,
                      correct5, examples));
  DTRAIN_ASSIGN_OR_RETURN(
      std::vector<double> maxima,
      AllReduceValues(backend_, {seconds, data_time.sum(), exposed},
                      ReduceOp::kMax, device_, o_.timeout));
  m->epoch = epoch;
  m->steps = static_cast<int64_t>(step_seconds.size());
  m->samples = static_cast<int64_t>(scores.examples);
  m->lr = schedule_->LearningRate(epoch, first_step);
  m->skipped_steps = skipped;
  if (o_.clip_grad_norm > 0 && !step_seconds.empty())
    m->grad_norm_mean = grad_norm_sum / step_seconds.size();
  if (const LossScaler* scaler = step_->loss_scaler(); scaler != nullptr)
    m->loss_scale = scaler->scale();
  m->epoch_seconds = maxima[0];
  m->samples_per_second =
      m->epoch_seconds > 0 ? scores.examples / m->epoch_seconds : 0;
  m->train_loss = scores.loss;
  m->train_top1 = scores.top1;
  m->train_top5 = scores.top5;
  m->data_seconds = maxima[1];
  m->exposed_communication_seconds = maxima[2];
  m->ddp_timeline = timeline.Mean();
  for (double x : step_seconds) m->step_seconds_sum += x;
  m->step_seconds_mean =
      step_seconds.empty() ? 0 : m->step_seconds_sum / step_seconds.size();
  m->step_seconds_p50 = Percentile(step_seconds, 50);
  m->step_seconds_p90 = Percentile(step_seconds, 90);
  m->step_seconds_max = Percentile(step_seconds, 100);
  m->step_histogram_counts = StepHistogram(step_seconds);
  return stopped;
}

absl::Status Run::CollectStopVote() {
  if (stop_vote_ != nullptr) {
    // A host read: on CUDA, only a finished vote is a real one, and since a
    // backend runs collectives in order, a good vote also says the step's
    // gradient buckets were good.
    absl::Status waited = stop_vote_->WaitForResult(o_.timeout);
    stop_vote_ = nullptr;
    DTRAIN_RETURN_IF_ERROR(waited);
    signal_stop_ = stop_flag_.item<int>() != 0;
  } else if (context_.stop_requested != nullptr && !o_.sync_gradients) {
    // Without gradient sync the ranks run independently anyway.
    signal_stop_ = context_.stop_requested->load();
  }
  return absl::OkStatus();
}

absl::Status Run::SanityCheckValidation() {
  if (o_.num_sanity_val_steps <= 0 || o_.skip_validation)
    return absl::OkStatus();
  const absl::Time start = absl::Now();
  EvaluationOptions options;
  options.max_batches = o_.num_sanity_val_steps;
  absl::StatusOr<Scores> scores =
      EvaluateOnRanks(*model_, *val_loader_, data_->val->size(), backend_,
                      device_, o_.timeout, options);
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

absl::Status Run::Validate(EpochMetrics* m) {
  const absl::Time start = absl::Now();
  EvaluationOptions options;
  if (o_.sync_gradients) options.stop_requested = context_.stop_requested;
  DTRAIN_ASSIGN_OR_RETURN(
      const Scores scores,
      EvaluateOnRanks(*model_, *val_loader_, data_->val->size(), backend_,
                      device_, o_.timeout, options));
  m->val_loss = scores.loss;
  m->val_top1 = scores.top1;
  m->val_top5 = scores.top5;
  m->val_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return absl::OkStatus();
}

absl::StatusOr<TrainResult> Run::Evaluate() {
  if (!resumed_ && o_.init_state_dict.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--evaluate: no checkpoint in ", o_.checkpoint_dir, " to evaluate"));
  }
  EpochMetrics m;
  m.epoch = start_epoch_;
  DTRAIN_RETURN_IF_ERROR(Validate(&m));
  best_top1_ = *m.val_top1;
  Say(absl::StrFormat(
      " * evaluation of %s: loss %.4f  Prec@1 %.3f  Prec@5 %.3f  (%.1f s)",
      metrics_.resumed_from.empty() ? o_.init_state_dict
                                    : metrics_.resumed_from,
      *m.val_loss, *m.val_top1, *m.val_top5, m.val_seconds));
  metrics_.epochs.push_back(m);
  // --evaluate --save_state_dict: also turns a checkpoint into weights.
  DTRAIN_RETURN_IF_ERROR(SaveStateDict());
  DTRAIN_RETURN_IF_ERROR(WriteMetrics());
  return TrainResult{metrics_, model_};
}

void Run::UpdateRunTotals() {
  metrics_.best_top1 = best_top1_;
  metrics_.global_step = global_step_;
  metrics_.wall_seconds = absl::ToDoubleSeconds(absl::Now() - context_.start);
}

absl::Status Run::WriteMetrics() {
  UpdateRunTotals();
  if (!rank0_ || o_.metrics_json.empty()) return absl::OkStatus();
  return WriteMetricsJson(o_.metrics_json, metrics_);
}

absl::StatusOr<TrainResult> Run::Execute() {
  DTRAIN_RETURN_IF_ERROR(Setup());
  if (o_.evaluate) return Evaluate();
  const bool done = start_epoch_ >= *o_.epochs ||
                    (o_.max_steps > 0 && global_step_ >= o_.max_steps);
  if (done && resumed_) {
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
    DTRAIN_ASSIGN_OR_RETURN(bool stopped, TrainEpoch(epoch, &m));
    DTRAIN_RETURN_IF_ERROR(live_->EndEpoch(m, global_step_));
    Say(absl::StrFormat(
        "epoch %d: loss %.4f  top1 %.2f%%  top5 %.2f%%  %.1f s  %.0f "
        "samples/s  (data %.2f s, exposed communication %.2f s)",
        epoch + 1, m.train_loss, m.train_top1, m.train_top5, m.epoch_seconds,
        m.samples_per_second, m.data_seconds, m.exposed_communication_seconds));
    // The epoch's checkpoint comes before its validation: a damaged
    // validation file or a signal during validation then costs no training.
    data::SamplerState next = train_loader_->state();
    int64_t next_epoch = epoch;
    if (!stopped) {
      next.epoch = next_epoch = epoch + 1;
      next.position = 0;
      next.start = 0;
    }
    DTRAIN_RETURN_IF_ERROR(SaveCheckpoint(next, next_epoch, /*best=*/false));
    if (!o_.skip_validation && !signal_stop_) {
      absl::Status validated = Validate(&m);
      if (absl::IsCancelled(validated)) {
        signal_stop_ = true;
        Say(absl::StrCat("validation of epoch ", epoch + 1,
                         " stopped by a signal; it is not repeated on "
                         "--resume (--evaluate gives it)"));
      } else {
        DTRAIN_RETURN_IF_ERROR(validated);
        const bool best = *m.val_top1 > best_top1_;
        best_top1_ = std::max(best_top1_, *m.val_top1);
        Say(absl::StrFormat(
            " * validation: loss %.4f  Prec@1 %.3f  Prec@5 %.3f  (best Prec@1 "
            "%.3f, %.1f s)",
            *m.val_loss, *m.val_top1, *m.val_top5, best_top1_, m.val_seconds));
        // Again with the new best accuracy in it, and as best.dtc.
        if (best)
          DTRAIN_RETURN_IF_ERROR(SaveCheckpoint(next, next_epoch, best));
      }
    }
    metrics_.epochs.push_back(m);
    DTRAIN_RETURN_IF_ERROR(WriteMetrics());
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
  if (o_.sync_gradients && world_.world_size > 1) {
    std::vector<std::pair<std::string, at::Tensor>> parameters;
    for (const auto& p : model_->named_parameters()) {
      parameters.emplace_back(p.key(), p.value());
    }
    DTRAIN_RETURN_IF_ERROR(
        CheckIdenticalAcrossRanks(backend_, parameters, device_, o_.timeout));
    metrics_.ranks_identical = true;
  }
  DTRAIN_RETURN_IF_ERROR(SaveStateDict());
  DTRAIN_RETURN_IF_ERROR(WriteMetrics());
  return TrainResult{metrics_, model_};
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
