// The training run of the tutorials, data-parallel: every rank builds the
// same model from the same seed, trains on its DistributedSampler shard with
// gradients averaged by DistributedDataParallel, and validates on its share
// of the test split, with top-1/top-5 summed exactly over ranks.
//
//   DTRAIN_ASSIGN_OR_RETURN(World world, rendezvous::InitWorld(...));
//   DTRAIN_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend,
//                           CreateBackend(...));
//   DTRAIN_ASSIGN_OR_RETURN(TrainOptions resolved,
//                           ResolveDefaults(options));
//   DTRAIN_ASSIGN_OR_RETURN(TrainResult result,
//                           Train(resolved, world, *backend, context));
//
// While it runs, live metrics and JSON lines as the options ask
// (trainer/report/live_report.h). Per epoch: the sampler's epoch, the step
// learning-rate schedule, a training pass with the tutorial's meters (batch
// time, data time, loss, top-1, top-5) shown by rank 0, a validation pass, the
// best top-1 so far, a checkpoint and the metrics file.
//
// Checkpoints: rank 0 writes them (see trainer/checkpoint/) at the end of
// every epoch, every checkpoint_every_steps steps, and when the run stops at
// max_steps. With resume, rank 0 reads the newest valid one and broadcasts
// its bytes, so the other ranks need no shared filesystem; every rank then
// restores the model, the optimizer, the schedule and the sampler position,
// and continues with the next batch the interrupted run would have taken.
// Random numbers inside the model (dropout) are drawn from a generator
// reseeded before every step from (seed, rank, step), so a resumed run draws
// what the uninterrupted one would have drawn: for a given configuration the
// two end with the same parameters.
//
// Collective: every rank calls Train with the same options, and a failure on
// one rank (a data error, a lost peer) surfaces on the others as a backend
// error within the timeout. Uses LibTorch's global generator and thread
// settings, so run one Train per process (tests run ranks as threads with
// intra_op_threads equal on all of them).
#ifndef DTRAIN_TRAINER_TRAINER_H_
#define DTRAIN_TRAINER_TRAINER_H_

#include <atomic>
#include <memory>
#include <ostream>

#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "dist/backend/backend.h"
#include "dist/rendezvous/init.h"
#include "models/model.h"
#include "trainer/elastic_handover.h"
#include "trainer/report/run_metrics.h"
#include "trainer/train_options.h"

namespace dtrain::trainer {

struct TrainContext {
  // Rank 0's progress and messages; other ranks write only where they serve
  // live metrics (--metrics_ranks=all).
  std::ostream* log = nullptr;
  // Whether `log` is a terminal (a progress bar for ProgressStyle::kAuto).
  bool log_is_terminal = false;
  // When the process started, for startup_seconds.
  absl::Time start = absl::Now();
  // Set (by a signal handler) to stop at the next step boundary: the ranks
  // agree on the step through a one-number allreduce issued with each step,
  // rank 0 writes a checkpoint there, and Train returns kCancelled. Null: no
  // graceful stop, and no extra collective.
  const std::atomic<bool>* stop_requested = nullptr;
  // The CUDA device to train on, or -1 for the CPU; must be >= 0 exactly when
  // the options' device is not "cpu". InitProcessGroup chooses it from its
  // device (ProcessGroup::cuda_device, dist/backend/process_group.h) and makes
  // it current before creating the backend, as //trainer:train does; or
  // choose it with backend::ChooseCudaDevice (dist/backend/device_choice.h)
  // and make it current (base::SetCurrentCudaDevice) yourself.
  int cuda_device = -1;
  // An elastic run's generation (trainer/elastic_handover.h): what it starts
  // from, and, when Train fails after training began, this rank's state as
  // of its last committed step. Null: neither.
  ElasticHandover* elastic = nullptr;
};

struct TrainResult {
  RunMetrics metrics;
  // The trained model: identical on every rank, except with
  // --comm_hook=local_sgd when steps ran since the last averaging.
  std::shared_ptr<models::Model> model;
};

// Runs the whole training. `options` must be resolved (ResolveDefaults);
// context.cuda_device must agree with options.device (kInvalidArgument);
// Validate's errors, dataset and checkpoint errors, and backend errors come
// back as they are, prefixed with "[rank R]". A graceful stop (see
// TrainContext::stop_requested) returns kCancelled saying at which step it
// stopped and where the checkpoint is, after writing the metrics file.
absl::StatusOr<TrainResult> Train(const TrainOptions& options,
                                  const rendezvous::World& world,
                                  backend::Backend& backend,
                                  const TrainContext& context);

}  // namespace dtrain::trainer

#endif  // DTRAIN_TRAINER_TRAINER_H_
