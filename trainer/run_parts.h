// The parts a training run is built of, from its resolved options: the
// device, the model, the optimizer, its schedule, DDP's options and the data
// loaders, and the lines that describe them (trainer.cc's Run assembles
// them). Stateless functions; thread-safe.
#ifndef DTRAIN_TRAINER_RUN_PARTS_H_
#define DTRAIN_TRAINER_RUN_PARTS_H_

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/optim/optimizer.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/example_source.h"
#include "data/loader.h"
#include "data/transforms.h"
#include "dist/backend/backend.h"
#include "dist/ddp/comm_hook.h"
#include "dist/ddp/ddp_types.h"
#include "dist/rendezvous/init.h"
#include "models/model.h"
#include "optim/lr_schedule.h"
#include "trainer/amp.h"
#include "trainer/checkpoint/training_state.h"
#include "trainer/report/run_metrics.h"
#include "trainer/train_options.h"
#include "trainer/training_data.h"

namespace dtrain::trainer {

// The device the caller chose (TrainContext::cuda_device, -1 for the CPU),
// checked against the options: kInvalidArgument when the two disagree,
// kFailedPrecondition when LibTorch cannot use the CUDA device.
absl::StatusOr<c10::Device> TrainingDevice(const TrainOptions& o,
                                           int cuda_device);

// SGD (lr, momentum, weight decay) or Adadelta (lr, weight decay), as the
// options say.
absl::StatusOr<std::unique_ptr<torch::optim::Optimizer>> MakeOptimizer(
    const TrainOptions& o, std::vector<at::Tensor> params);

// A loader over `source` in this rank's DistributedSampler order, seeded from
// the options, batch_size and workers from the options. `train`: the
// training split, shuffled, padded unless --even_batches=false; otherwise
// validation, in order and padded (its scores leave the padding out).
absl::StatusOr<std::unique_ptr<data::DataLoader>> MakeLoader(
    const std::shared_ptr<const data::ExampleSource>& source,
    const data::TransformPipeline& transforms, const TrainOptions& o,
    const rendezvous::World& world, bool train, bool pin_memory);

struct BuiltModel {
  std::shared_ptr<models::Model> model;
  // What rank 0 says about it (weights loaded, options without effect).
  std::vector<std::string> notes;
};

// The options' model for `data`, seeded from the options, on `device`, with
// SyncBatchNorm through `backend` when asked for and there is more than one
// rank, and the init_state_dict weights loaded (its errors after
// "--init_state_dict: "). The same on every rank.
absl::StatusOr<BuiltModel> BuildModel(const TrainOptions& o,
                                      const TrainingData& data,
                                      backend::Backend& backend,
                                      c10::Device device);

// The learning-rate schedule of the options over `optimizer`'s configured
// rates, with `steps_per_epoch` optimizer steps an epoch.
absl::StatusOr<optim::LrSchedule> MakeSchedule(
    const TrainOptions& o, torch::optim::Optimizer& optimizer,
    int64_t steps_per_epoch);

// DDP's options as the trainer's options set them.
ddp::DdpOptions MakeDdpOptions(const TrainOptions& o);

// The communication hook --comm_hook names, with its knobs; null for the
// built-in allreduce.
absl::StatusOr<std::shared_ptr<ddp::CommHook>> MakeCommHook(
    const DataParallelOptions& o);

// Rank 0's line describing the run once it is set up: the model and its
// size, the device, the world and batch sizes, DDP's buckets and what differs
// from a plain float32 run.
std::string RunSummary(const TrainOptions& o, const RunMetrics& metrics,
                       size_t buckets, Precision precision);

// Rank 0's line after a resume: the epoch, position and step it continues
// at and, when the checkpoint was saved by another number of processes, what
// that means for the rest of the epoch.
std::string ResumeLine(const TrainingState& state,
                       const data::DistributedSampler& sampler,
                       int64_t dataset_size, int world_size,
                       const std::string& path);

}  // namespace dtrain::trainer

#endif  // DTRAIN_TRAINER_RUN_PARTS_H_
