#include "trainer/run_parts.h"

#include <torch/cuda.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "data/distributed_sampler.h"
#include "dist/ddp/hooks/compress_hook.h"
#include "dist/ddp/hooks/local_sgd_hook.h"
#include "dist/ddp/hooks/powersgd_hook.h"
#include "dist/ddp/sync_batch_norm.h"
#include "models/registry.h"
#include "models/state_dict/state_dict.h"
#include "optim/adadelta.h"

namespace dtrain::trainer {

// The device the caller chose (TrainContext::cuda_device), checked against
// the options: the choice itself is made once, before the backend exists.
absl::StatusOr<c10::Device> TrainingDevice(const TrainOptions& o,
                                           int cuda_device) {
  if (o.launch.device == "cpu") {
    if (cuda_device < 0) return c10::Device(c10::kCPU);
    return absl::InvalidArgumentError(
        absl::StrCat("--device=cpu, but TrainContext::cuda_device is ",
                     cuda_device, " (leave it -1 for the CPU)"));
  }
  if (cuda_device < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--device=", o.launch.device,
        ": TrainContext::cuda_device is not set; InitProcessGroup with this "
        "device chooses it (ProcessGroup::cuda_device) and makes it current"));
  }
  if (!torch::cuda::is_available() ||
      cuda_device >= static_cast<int>(torch::cuda::device_count())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--device=", o.launch.device, ": cuda:", cuda_device,
        " is not usable from LibTorch (it sees ",
        torch::cuda::is_available() ? torch::cuda::device_count() : 0,
        " CUDA devices; a CPU-only LibTorch sees none)"));
  }
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(cuda_device));
}

absl::StatusOr<std::unique_ptr<torch::optim::Optimizer>> MakeOptimizer(
    const TrainOptions& o, std::vector<torch::Tensor> params) {
  if (*o.optim.optimizer == "sgd") {
    return std::unique_ptr<torch::optim::Optimizer>(new torch::optim::SGD(
        std::move(params), torch::optim::SGDOptions(*o.optim.lr)
                               .momentum(*o.optim.momentum)
                               .weight_decay(*o.optim.weight_decay)));
  }
  if (*o.optim.optimizer == "adam") {
    return std::unique_ptr<torch::optim::Optimizer>(new torch::optim::Adam(
        std::move(params), torch::optim::AdamOptions(*o.optim.lr)
                               .weight_decay(*o.optim.weight_decay)));
  }
  if (*o.optim.optimizer == "adamw") {
    return std::unique_ptr<torch::optim::Optimizer>(new torch::optim::AdamW(
        std::move(params), torch::optim::AdamWOptions(*o.optim.lr)
                               .weight_decay(*o.optim.weight_decay)));
  }
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::move(params));
  DTRAIN_ASSIGN_OR_RETURN(
      std::unique_ptr<optim::Adadelta> adadelta,
      optim::Adadelta::Create(std::move(groups),
                              optim::AdadeltaOptions(*o.optim.lr)
                                  .weight_decay(*o.optim.weight_decay)));
  return std::unique_ptr<torch::optim::Optimizer>(std::move(adadelta));
}

absl::StatusOr<std::unique_ptr<data::DataLoader>> MakeLoader(
    const std::shared_ptr<const data::ExampleSource>& source,
    const data::TransformPipeline& transforms, const TrainOptions& o,
    const rendezvous::World& world, bool train, bool pin_memory) {
  data::DistributedSamplerOptions s;
  s.num_replicas = world.world_size;
  s.rank = world.rank;
  s.shuffle = train;
  s.pad = !train || o.data.even_batches;
  s.seed = o.seed;
  DTRAIN_ASSIGN_OR_RETURN(data::DistributedSampler sampler,
                          data::DistributedSampler::Create(source->size(), s));
  data::LoaderOptions l;
  l.batch_size = *o.data.batch_size;
  l.num_workers = o.data.workers;
  l.seed = o.seed;
  l.pin_memory = pin_memory;
  return data::DataLoader::Create(source, std::move(sampler), transforms, l);
}

absl::StatusOr<BuiltModel> BuildModel(const TrainOptions& o,
                                      const TrainingData& data,
                                      backend::Backend& backend,
                                      c10::Device device) {
  models::ModelConfig config;
  config.num_classes = data.num_classes;
  config.in_channels = data.input_shape[0];
  config.image_size = data.input_shape[1];
  config.small_input_stem = o.model.small_input_stem;
  if (o.parallel.sync_batchnorm && backend.size() > 1) {
    ddp::SyncBatchNormOptions sync;
    sync.timeout = o.launch.timeout;
    config.norm_layer = ddp::SyncBatchNormLayers(backend, sync);
  }
  // Every rank builds the same initial weights; DDP broadcasts rank 0's all
  // the same, which also covers models whose construction is not seeded.
  torch::manual_seed(o.seed);
  BuiltModel built;
  DTRAIN_ASSIGN_OR_RETURN(built.model,
                          models::CreateModel(o.model.name, config));
  if (o.parallel.sync_batchnorm &&
      !models::FindModel(o.model.name)->batch_norm) {
    built.notes.push_back(absl::StrCat(
        "--sync_batchnorm: ", o.model.name,
        " has no batch norm layers; it trains unchanged, as PyTorch's "
        "convert_sync_batchnorm leaves it"));
  }
  built.model->to(device);
  if (o.model.init_state_dict.empty()) return built;
  models::state_dict::LoadOptions load;
  load.strict = o.model.init_state_dict_strict;
  load.exclude = o.model.init_state_dict_exclude;
  load.strict_flag = "--init_state_dict_strict";
  load.exclude_flag = "--init_state_dict_exclude";
  absl::StatusOr<models::state_dict::LoadReport> loaded =
      models::state_dict::LoadStateDict(o.model.init_state_dict, *built.model,
                                        load);
  if (!loaded.ok()) {
    return absl::Status(
        loaded.status().code(),
        absl::StrCat("--init_state_dict: ", loaded.status().message()));
  }
  built.notes.push_back(absl::StrCat("weights from ", o.model.init_state_dict,
                                     ": ", loaded->Summary()));
  return built;
}

absl::StatusOr<optim::LrSchedule> MakeSchedule(
    const TrainOptions& o, torch::optim::Optimizer& optimizer,
    int64_t steps_per_epoch) {
  optim::LrScheduleOptions lr;
  DTRAIN_ASSIGN_OR_RETURN(lr.kind,
                          optim::ParseLrScheduleKind(o.optim.lr_schedule));
  lr.step = {o.optim.lr_step_epochs, o.optim.lr_gamma};
  lr.epochs = *o.optim.epochs;
  lr.warmup_epochs = o.optim.warmup_epochs;
  lr.steps_per_epoch = steps_per_epoch;
  return optim::LrSchedule::Create(optimizer, lr);
}

ddp::DdpOptions MakeDdpOptions(const TrainOptions& o) {
  ddp::DdpOptions d;
  d.bucket_cap_bytes =
      static_cast<int64_t>(o.parallel.bucket_cap_mb * (1 << 20));
  d.first_bucket_cap_bytes =
      std::min(d.first_bucket_cap_bytes, d.bucket_cap_bytes);
  // Without gradient sync nothing else may communicate either: the run
  // measures what the machine does with no communication at all.
  d.broadcast_buffers = o.parallel.sync_gradients;
  d.timeout = o.launch.timeout;
  d.gradient_as_bucket_view = o.parallel.gradient_as_bucket_view;
  d.static_graph = o.parallel.static_graph;
  // ZeRO stage 2 reduce-scatters the buckets in place.
  d.pad_buckets_to_world_size = o.parallel.zero == 2;
  return d;
}

absl::StatusOr<std::shared_ptr<ddp::CommHook>> MakeCommHook(
    const DataParallelOptions& o) {
  if (o.comm_hook == "allreduce") return nullptr;
  if (o.comm_hook == "fp16") return ddp::hooks::Fp16CompressHook();
  if (o.comm_hook == "bf16") return ddp::hooks::Bf16CompressHook();
  if (o.comm_hook == "powersgd") {
    ddp::hooks::PowerSgdOptions p;
    p.matrix_approximation_rank = static_cast<int>(o.powersgd_rank);
    p.start_powersgd_iter = o.powersgd_start_step;
    p.min_compression_rate = o.powersgd_min_compression_rate;
    p.use_error_feedback = o.powersgd_error_feedback;
    p.warm_start = o.powersgd_warm_start;
    p.random_seed = o.powersgd_seed;
    return std::make_shared<ddp::hooks::PowerSgdHook>(p);
  }
  if (o.comm_hook == "local_sgd") {
    return std::make_shared<ddp::hooks::LocalSgdHook>(o.local_sgd_start_step);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--comm_hook: unknown hook '", o.comm_hook, "'"));
}

std::string CommHookSummary(const DataParallelOptions& o) {
  if (o.comm_hook == "fp16") return " (float16 on the wire)";
  if (o.comm_hook == "bf16") return " (bfloat16 on the wire)";
  if (o.comm_hook == "powersgd") {
    return absl::StrFormat(" (PowerSGD rank %d from step %d)", o.powersgd_rank,
                           o.powersgd_start_step);
  }
  if (o.comm_hook == "local_sgd") {
    return absl::StrFormat(
        " (post-local SGD from step %d, parameters averaged every %d steps)",
        o.local_sgd_start_step, o.local_sgd_period);
  }
  return "";
}

std::string RunSummary(const TrainOptions& o, const RunMetrics& metrics,
                       size_t buckets, Precision precision) {
  const int64_t global_batch = *o.data.batch_size * metrics.world_size;
  return absl::StrFormat(
      "%s: %d parameters, %s, world size %d (%s), batch %d per process "
      "(global %d%s), %d buckets%s%s%s",
      o.model.name, metrics.parameters, metrics.device, metrics.world_size,
      metrics.backend, *o.data.batch_size, global_batch,
      o.optim.accumulate_steps > 1
          ? absl::StrCat(", ", o.optim.accumulate_steps,
                         " per step: effective ",
                         global_batch * o.optim.accumulate_steps)
          : "",
      buckets, CommHookSummary(o.parallel),
      precision != Precision::kFloat32
          ? absl::StrCat(", autocast ", PrecisionName(precision))
          : "",
      o.parallel.sync_gradients
          ? ""
          : ", gradient sync OFF (no-communication bound)");
}

std::string ResumeLine(const TrainingState& state,
                       const data::DistributedSampler& sampler,
                       int64_t dataset_size, int world_size,
                       const std::string& path) {
  std::string how;
  if (state.sampler.num_replicas != world_size) {
    how =
        sampler.start() == 0
            ? absl::StrCat("; saved by ", state.sampler.num_replicas,
                           " processes at an epoch boundary: continuing "
                           "exactly as a run of ",
                           world_size, " would")
            : absl::StrCat(
                  "; saved by ", state.sampler.num_replicas,
                  " processes inside epoch ", state.sampler.epoch, ": the ",
                  dataset_size - sampler.start(),
                  " examples it had left are re-partitioned over ", world_size,
                  " processes (each seen once; its batches differ from an "
                  "uninterrupted run's)");
  }
  return absl::StrCat("resumed from ", path, ": epoch ", sampler.epoch(),
                      ", example ", sampler.position(), " of ",
                      sampler.num_samples(), " per rank, step ",
                      state.global_step, how);
}

}  // namespace dtrain::trainer
