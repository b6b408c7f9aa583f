// A training run's parts, built from resolved options in the order the ranks
// need them: the device and the reporting first (a busy metrics port fails
// before any collective), the data, the model and its optimizer, the
// schedule, the checkpoint read on --resume (before DDP, which then starts
// every rank from the loaded weights), DDP with its communication hook (the
// checkpoint's hook state restored into it), the training step and the stop
// vote. trainer.cc's loop runs over them.
//
// Collective: every rank calls AssembleRun with the same options (the resume
// broadcast, SyncBatchNorm's and DDP's construction communicate).
// Lifetimes: the backend, the options and everything `env` points to must
// outlive the parts; RunParts' members are destroyed in reverse order of
// declaration, users (DDP, the step) before what they use.
#ifndef DTRAIN_TRAINER_RUN_ASSEMBLY_H_
#define DTRAIN_TRAINER_RUN_ASSEMBLY_H_

#include <c10/core/Device.h>
#include <torch/optim/optimizer.h>

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/types/optional.h"
#include "data/loader.h"
#include "dist/backend/backend.h"
#include "dist/backend/small_collectives.h"
#include "dist/ddp/ddp.h"
#include "dist/ddp/model_averager.h"
#include "dist/rendezvous/init.h"
#include "dist/zero/sharded_optimizer.h"
#include "models/model.h"
#include "optim/lr_schedule.h"
#include "trainer/checkpoint/training_state.h"
#include "trainer/elastic_handover.h"
#include "trainer/loop_checkpoints.h"
#include "trainer/report/recorder.h"
#include "trainer/stop_vote.h"
#include "trainer/train_options.h"
#include "trainer/train_step.h"
#include "trainer/training_data.h"

namespace dtrain::trainer {

// Where the run is started from, beyond its options (see TrainContext).
struct RunEnvironment {
  Recorder::Setup report;
  // The CUDA device to train on, or -1 for the CPU.
  int cuda_device = -1;
  // Null: no graceful stop, and no stop vote.
  const std::atomic<bool>* stop_requested = nullptr;
  // An elastic run's generation: with start_from_memory, the run starts from
  // rank 0's bytes instead of --resume's directory. Null otherwise.
  const ElasticHandover* elastic = nullptr;
};

struct RunParts {
  c10::Device device{c10::kCPU};
  absl::optional<backend::SmallCollectives> sync;
  std::unique_ptr<Recorder> recorder;
  absl::optional<TrainingData> data;
  std::shared_ptr<models::Model> model;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::unique_ptr<data::DataLoader> train_loader;
  std::unique_ptr<data::DataLoader> val_loader;
  // Loader batches in a whole epoch.
  int64_t batches_per_epoch = 0;
  absl::optional<optim::LrSchedule> schedule;
  // With a checkpoint directory.
  absl::optional<LoopCheckpoints> checkpoints;
  // Where training starts: the loaded checkpoint's state (checkpoints'
  // resumed() says whether one was loaded), or epoch 0 step 0.
  TrainingState start;
  std::unique_ptr<ddp::DistributedDataParallel> ddp;
  // With --zero: it steps, and `optimizer` (over the model's parameters, as
  // without ZeRO) only carries the state to and from checkpoints
  // (trainer/checkpoint/sharded_state.h).
  std::unique_ptr<zero::ShardedOptimizer> zero;
  // With --comm_hook=local_sgd; the step uses it.
  std::unique_ptr<ddp::PeriodicModelAverager> averager;
  std::unique_ptr<TrainStep> step;
  std::unique_ptr<StopVote> stop_vote;
};

// Validate's and CheckOutputPaths' errors first, then each part's own.
absl::StatusOr<RunParts> AssembleRun(const TrainOptions& o,
                                     const rendezvous::World& world,
                                     backend::Backend& backend,
                                     const RunEnvironment& env);

}  // namespace dtrain::trainer

#endif  // DTRAIN_TRAINER_RUN_ASSEMBLY_H_
