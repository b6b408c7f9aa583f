#include "trainer/run_assembly.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/compute_threads.h"
#include "base/status_macros.h"
#include "data/distributed_sampler.h"
#include "dist/ddp/comm_hook.h"
#include "dist/ddp/sync_batch_norm.h"
#include "trainer/amp.h"
#include "trainer/checkpoint/hook_state.h"
#include "trainer/checkpoint/sharded_state.h"
#include "trainer/run_parts.h"

namespace dtrain::trainer {
namespace {

// --resume: the newest valid checkpoint into the model, the optimizer and
// (unless only evaluating, which needs the weights alone, on any number of
// ranks) the training loader's position; its hook state into `hook`, for
// RestoreHookState once DDP exists.
absl::Status Resume(const TrainOptions& o, const rendezvous::World& world,
                    RunParts& p, HookState* hook) {
  Recorder& r = *p.recorder;
  DTRAIN_ASSIGN_OR_RETURN(
      p.start,
      p.checkpoints->Resume(*p.model, *p.optimizer,
                            o.evaluate ? nullptr : p.train_loader.get(), hook));
  for (const std::string& skipped : p.checkpoints->skipped())
    r.Say(absl::StrCat("skipping checkpoint ", skipped));
  const std::string& from = p.checkpoints->resumed_from();
  if (!p.checkpoints->resumed()) {
    r.Say(absl::StrCat("no checkpoint in ", o.checkpoint.checkpoint_dir,
                       ": starting from the beginning"));
  } else if (o.evaluate) {
    r.metrics().resumed_from = from;
    r.Say(absl::StrCat("loaded ", from, " (step ", p.start.global_step, ")"));
  } else {
    r.metrics().resumed_from = from;
    r.Say(ResumeLine(p.start, p.train_loader->sampler(), p.data->train->size(),
                     world.world_size, from));
  }
  return absl::OkStatus();
}

// The checkpoint's hook state into the registered hook when it is the same
// hook: the shared part on every rank, and each rank's own per-rank part
// when the world size is the writer's. Otherwise the hook (or its per-rank
// part) starts afresh, which rank 0 says rather than resuming inexactly in
// silence.
absl::Status RestoreHookState(const HookState& saved, ddp::CommHook& hook,
                              const rendezvous::World& world, Recorder& r) {
  const std::string name = hook.name();
  if (saved.name == name) {
    if (absl::Status s = hook.LoadState(saved.tensors); !s.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--resume: the checkpoint's state of communication hook ", name,
          " does not fit this model and hook: ", s.message()));
    }
    if (saved.ranks.empty()) return absl::OkStatus();
    const int saved_world = static_cast<int>(saved.ranks.size());
    if (saved_world != world.world_size) {
      r.Say(absl::StrCat(
          "the checkpoint's per-rank state of communication hook ", name,
          " was written by ", saved_world, " ranks, this run has ",
          world.world_size, ": it cannot be mapped to these ranks, so ", name,
          "'s per-rank state starts fresh (its shared state is loaded)"));
      return absl::OkStatus();
    }
    if (absl::Status s = hook.LoadRankState(saved.ranks[world.rank]); !s.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--resume: the checkpoint's per-rank state of communication hook ",
          name, " for rank ", world.rank,
          " does not fit this model and hook: ", s.message()));
    }
    return absl::OkStatus();
  }
  const bool keeps_state = !hook.State().empty();
  if (!saved.name.empty()) {
    std::string line =
        absl::StrCat("the checkpoint was written with --comm_hook=", saved.name,
                     ", this run uses ", name);
    if (keeps_state) {
      absl::StrAppend(&line, ": ", name, " starts from a fresh state");
    } else if (!saved.tensors.empty() || !saved.ranks.empty()) {
      absl::StrAppend(&line, ": the checkpoint's ", saved.name,
                      " state is not used");
    }
    r.Say(line);
  } else if (keeps_state) {
    r.Say(
        absl::StrCat("the checkpoint holds no communication hook state (an "
                     "older format, or written without DDP): ",
                     name, " starts from a fresh state"));
  }
  return absl::OkStatus();
}

// --zero: the sharded optimizer, made as the run's optimizer is but over this
// rank's shares; the schedule moves to it (its base rates the configured
// ones), and a resumed checkpoint's state is sliced into it. Collective.
absl::Status StartZero(const TrainOptions& o, int64_t steps_per_epoch,
                       bool resumed, RunParts& p) {
  absl::Status made;
  DTRAIN_ASSIGN_OR_RETURN(
      p.zero,
      zero::ShardedOptimizer::Create(
          *p.ddp, {o.parallel.zero},
          [&](std::vector<at::Tensor> shares)
              -> std::unique_ptr<torch::optim::Optimizer> {
            absl::StatusOr<std::unique_ptr<torch::optim::Optimizer>> optimizer =
                MakeOptimizer(o, std::move(shares));
            if (!optimizer.ok()) {
              made = optimizer.status();
              return nullptr;
            }
            return *std::move(optimizer);
          }));
  DTRAIN_RETURN_IF_ERROR(made);
  DTRAIN_ASSIGN_OR_RETURN(
      p.schedule, MakeSchedule(o, p.zero->optimizer(), steps_per_epoch));
  if (resumed) {
    DTRAIN_RETURN_IF_ERROR(ScatterShardedState(*p.optimizer, *p.zero));
  }
  p.optimizer->state().clear();
  int64_t elements = 0;
  for (const at::Tensor& t : p.model->parameters()) elements += t.numel();
  p.recorder->Say(absl::StrCat("ZeRO stage ", o.parallel.zero,
                               ": this rank keeps the optimizer state of ",
                               p.zero->shard_numel(), " of ", elements,
                               " parameter elements"));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RunParts> AssembleRun(const TrainOptions& o,
                                     const rendezvous::World& world,
                                     backend::Backend& backend,
                                     const RunEnvironment& env) {
  DTRAIN_RETURN_IF_ERROR(Validate(o));
  // Before anything takes time: a path that cannot be written would
  // otherwise fail only after training, losing the weights.
  DTRAIN_RETURN_IF_ERROR(CheckOutputPaths(o, world.rank));
  base::SetComputeThreads(o.launch.intra_op_threads);
  RunParts p;
  DTRAIN_ASSIGN_OR_RETURN(p.device, TrainingDevice(o, env.cuda_device));
  DTRAIN_ASSIGN_OR_RETURN(const Precision precision,
                          ParsePrecision(o.optim.amp));
  DTRAIN_RETURN_IF_ERROR(CheckPrecision(precision, p.device));
  p.sync.emplace(backend, p.device, o.launch.timeout);
  Recorder::Setup report = env.report;
  report.epochs = *o.optim.epochs;
  report.clips_gradients = o.optim.clip_grad_norm > 0;
  DTRAIN_ASSIGN_OR_RETURN(p.recorder,
                          Recorder::Create(o.report, report, *p.sync));
  Recorder& r = *p.recorder;

  if (env.elastic != nullptr && env.elastic->data.has_value()) {
    p.data = env.elastic->data;
  } else {
    DTRAIN_ASSIGN_OR_RETURN(p.data, LoadTrainingData(o));
    r.Say(absl::StrCat("data: ", p.data->description));
  }
  DTRAIN_ASSIGN_OR_RETURN(BuiltModel built,
                          BuildModel(o, *p.data, backend, p.device));
  p.model = std::move(built.model);
  for (const std::string& note : built.notes) r.Say(note);
  r.metrics().sync_batchnorm_layers = ddp::LabelSyncBatchNorms(*p.model);
  DTRAIN_ASSIGN_OR_RETURN(p.optimizer, MakeOptimizer(o, p.model->parameters()));
  const bool pin = p.device.is_cuda();
  DTRAIN_ASSIGN_OR_RETURN(p.train_loader,
                          MakeLoader(p.data->train, p.data->train_transforms, o,
                                     world, /*train=*/true, pin));
  DTRAIN_ASSIGN_OR_RETURN(
      p.val_loader, MakeLoader(p.data->val, p.data->val_transforms, o, world,
                               /*train=*/false, pin));
  p.batches_per_epoch = p.train_loader->batches_left();
  // Created before a checkpoint is loaded, so that the base rates are the
  // configured ones, not a decayed rate from the checkpoint. Every rank
  // counts the same steps per epoch: without padding, those of the ranks
  // with the most batches (rank 0's), which the others shadow.
  const int64_t schedule_batches =
      o.data.even_batches
          ? p.batches_per_epoch
          : (data::DistributedSampler::NumSamples(p.data->train->size(),
                                                  world.world_size, false) +
             *o.data.batch_size - 1) /
                *o.data.batch_size;
  const int64_t steps_per_epoch =
      std::max<int64_t>(1, (schedule_batches + o.optim.accumulate_steps - 1) /
                               o.optim.accumulate_steps);
  DTRAIN_ASSIGN_OR_RETURN(p.schedule,
                          MakeSchedule(o, *p.optimizer, steps_per_epoch));
  if (!o.checkpoint.checkpoint_dir.empty()) {
    DTRAIN_ASSIGN_OR_RETURN(
        p.checkpoints,
        LoopCheckpoints::Open(
            o.checkpoint.checkpoint_dir, backend,
            {o.checkpoint.keep_checkpoints, p.device, o.launch.timeout,
             o.model.name, *o.optim.optimizer}));
  }
  HookState saved_hook;
  bool resumed = false;
  if (env.elastic != nullptr && env.elastic->start_from_memory) {
    // Each rank holds the same state (elastic_state.h): no broadcast here.
    absl::StatusOr<std::string> arrived = std::string();
    if (env.elastic->await_start_bytes)
      arrived = env.elastic->await_start_bytes();
    absl::StatusOr<TrainingState> start =
        !arrived.ok()
            ? arrived.status()
            : RestoreFromBytes(
                  {o.checkpoint.keep_checkpoints, p.device, o.launch.timeout,
                   o.model.name, *o.optim.optimizer},
                  env.elastic->await_start_bytes ? *arrived
                                                 : env.elastic->start_bytes,
                  *p.model, *p.optimizer, p.train_loader.get(), &saved_hook,
                  &resumed);
    // A rank that cannot decode fails every rank, rather than leaving them
    // waiting in the first collective.
    DTRAIN_ASSIGN_OR_RETURN(
        std::vector<double> failed,
        p.sync->AllReduce({start.ok() ? 0.0 : 1.0}, backend::ReduceOp::kSum));
    if (!start.ok()) return start.status();
    if (failed[0] > 0) {
      return absl::AbortedError(absl::StrCat(
          failed[0], failed[0] == 1 ? " rank" : " ranks",
          " could not load the state this generation starts from"));
    }
    p.start = *std::move(start);
    r.Say(absl::StrCat("this generation of ", world.world_size,
                       world.world_size == 1 ? " rank" : " ranks",
                       " goes on from step ", p.start.global_step));
  } else if (o.checkpoint.resume) {
    DTRAIN_RETURN_IF_ERROR(Resume(o, world, p, &saved_hook));
    resumed = p.checkpoints->resumed();
  }

  ddp::DdpOptions ddp_options = MakeDdpOptions(o);
  // Every rank decoded rank 0's checkpoint bytes: the model is the same.
  if (resumed || (env.elastic != nullptr && env.elastic->start_from_memory))
    ddp_options.init_sync = false;
  DTRAIN_ASSIGN_OR_RETURN(p.ddp, ddp::DistributedDataParallel::Create(
                                     p.model, backend, ddp_options));
  DTRAIN_ASSIGN_OR_RETURN(std::shared_ptr<ddp::CommHook> hook,
                          MakeCommHook(o.parallel));
  if (hook != nullptr) DTRAIN_RETURN_IF_ERROR(p.ddp->RegisterCommHook(hook));
  if (resumed && !o.evaluate) {
    DTRAIN_RETURN_IF_ERROR(
        RestoreHookState(saved_hook, p.ddp->comm_hook(), world, r));
  }
  p.ddp->set_gradient_sync(o.parallel.sync_gradients);
  if (o.parallel.zero > 0 && !o.evaluate) {
    DTRAIN_RETURN_IF_ERROR(StartZero(o, steps_per_epoch, resumed, p));
  }
  p.step = std::make_unique<TrainStep>(
      StepOptions{o.optim.accumulate_steps, precision, o.optim.clip_grad_norm},
      *p.model, *p.ddp, *p.optimizer, p.device);
  p.step->set_sharded_optimizer(p.zero.get());
  if (o.parallel.comm_hook == "local_sgd") {
    p.averager = std::make_unique<ddp::PeriodicModelAverager>(
        backend, ddp::ModelAveragingOptions{o.parallel.local_sgd_period,
                                            o.parallel.local_sgd_start_step,
                                            o.launch.timeout});
    DTRAIN_RETURN_IF_ERROR(p.averager->Validate());
    // Its count of steps goes on from the checkpoint's.
    p.averager->set_step(p.start.global_step);
    p.step->set_model_averager(p.averager.get());
  }
  p.stop_vote = std::make_unique<StopVote>(
      *p.sync, env.stop_requested,
      /*collective=*/o.parallel.sync_gradients,
      env.elastic != nullptr ? env.elastic->regroup_requested : nullptr);

  RunMetrics& metrics = r.metrics();
  metrics.options = o;
  metrics.world_size = world.world_size;
  metrics.backend = std::string(backend.name());
  metrics.backend_layout = backend.layout();
  metrics.device = p.device.str();
  metrics.data = p.data->description;
  metrics.launch_source = std::string(world.launch.source_name());
  metrics.parameters = models::NumParameters(*p.model);
  r.Say(RunSummary(o, metrics, p.ddp->buckets().size(), precision));
  return p;
}

}  // namespace dtrain::trainer
