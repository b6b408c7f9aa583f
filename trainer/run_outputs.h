// What a training run writes: rank 0's checkpoints (through LoopCheckpoints,
// the same protocol a loop of one's own uses; with rank 0's shared
// communication hook state and every rank's per-rank state) and the
// PyTorch-compatible weights (--save_state_dict). Nothing is written before
// the last step's gradient averaging is confirmed good: on CUDA it can fail
// after the step was queued, and a checkpoint of unaveraged weights would be
// silently wrong.
//
// Checkpoint is collective with a checkpoint directory, gradient sync and
// `together` (every rank calls it at the same steps, in the same order as
// its other collectives: it gathers the per-rank hook state); StateDict is
// not (other ranks return at once). Thread-compatible. Lifetimes: the options
// and the parts outlive the object.
#ifndef DTRAIN_TRAINER_RUN_OUTPUTS_H_
#define DTRAIN_TRAINER_RUN_OUTPUTS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "data/distributed_sampler.h"
#include "trainer/run_assembly.h"
#include "trainer/train_options.h"

namespace dtrain::trainer {

class RunOutputs {
 public:
  RunOutputs(const TrainOptions& options, int rank, RunParts& parts)
      : o_(options), rank0_(rank == 0), p_(parts) {}

  // A checkpoint at `global_step` that continues with `sampler` (its epoch
  // the one to continue at); with `best`, also as best.dtc. With
  // state_dict_with_checkpoints, the weights too. Does nothing without a
  // checkpoint directory. Every rank confirms its last step; rank 0 writes.
  // `together`: every rank makes this call here, so the per-rank hook state
  // can be gathered. Not so inside a Join epoch (uneven inputs), where a rank
  // out of batches shadows the others' steps and the ranks' last batches
  // differ: there the checkpoint goes without it (rank 0 says so when its
  // hook has some), and a resume from it starts that state fresh.
  absl::Status Checkpoint(const data::SamplerState& sampler,
                          int64_t global_step, double best_top1, bool best,
                          bool together = true);

  // --save_state_dict (when set), saying so.
  absl::Status StateDict(int64_t global_step);

 private:
  // The last step's gradient averaging finished well.
  absl::Status ConfirmLastStep(int64_t global_step);

  const TrainOptions& o_;
  const bool rank0_;
  RunParts& p_;
};

}  // namespace dtrain::trainer

#endif  // DTRAIN_TRAINER_RUN_OUTPUTS_H_
