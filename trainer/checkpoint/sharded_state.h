// ZeRO's sharded optimizer state (dist/zero/sharded_optimizer.h) in
// checkpoints: gathered into the state an unsharded optimizer over the
// module's parameters holds after the same steps, and sliced back out of one.
// A ZeRO run's checkpoint is thus what a run without ZeRO writes (the same
// bytes at stage 1), and it resumes on any number of ranks, with or without
// ZeRO. PyTorch's ZeroRedundancyOptimizer does the same with
// consolidate_state_dict and load_state_dict.
//
//   // Once: an optimizer of the same kind over the module's parameters, in
//   // the order the run's checkpoints use (model->parameters()). Never
//   // stepped: it only carries state to and from checkpoints.
//   std::unique_ptr<torch::optim::Optimizer> full =
//       factory(model->parameters());
//   // At each checkpoint, every rank; rank 0 then writes `full`:
//   DTRAIN_RETURN_IF_ERROR(
//       GatherShardedState(*zero, rank == 0 ? full.get() : nullptr));
//   checkpoints.Save(*model, *full, ...);
//   full->state().clear();
//   // At resume, every rank:
//   checkpoints.Resume(*model, *full, ...);
//   DTRAIN_RETURN_IF_ERROR(ScatterShardedState(*full, *zero));
//   full->state().clear();
//
// For the element-wise optimizers the checkpoint format knows (SGD, Adadelta,
// Adam, AdamW: checkpoint.h), with one parameter group in both optimizers.
//
// Thread safety: none; the training thread. Lifetimes: nothing is kept.
#ifndef DTRAIN_TRAINER_CHECKPOINT_SHARDED_STATE_H_
#define DTRAIN_TRAINER_CHECKPOINT_SHARDED_STATE_H_

#include <torch/optim/optimizer.h>

#include "absl/status/status.h"
#include "dist/zero/sharded_optimizer.h"

namespace dtrain::trainer {

// Collective over the DDP backend of `sharded`, in the same order as its
// other collectives: one small allreduce, then one allgather per bucket and
// state tensor (Adam: two). On the rank whose `full` is not null (rank 0, the
// one that writes checkpoints), `full`'s state is replaced by the state of
// every parameter in DDP's buckets as an unsharded optimizer would hold it,
// and its group options by the sharded optimizer's (the learning rate of a
// schedule included). Memory: besides `full`, each rank holds one bucket of
// one state tensor at a time. Errors, on every rank alike (the non-null
// rank's checks travel in the allreduce): kInvalidArgument when the sharded
// optimizer is not one the checkpoint format knows, or `full` is not of its
// kind or has another number of parameter groups than one; kInternal when
// the ranks' shares disagree on their state (some stepped, some not); the
// backend's errors, naming the bucket.
absl::Status GatherShardedState(zero::ShardedOptimizer& sharded,
                                torch::optim::Optimizer* full);

// Not collective: every rank reads the same `full` (a checkpoint decoded into
// it) and makes the same decisions. Replaces the sharded optimizer's state by
// this rank's share of `full`'s, and its group options by `full`'s; `full`
// is only read. A parameter in DDP's buckets without state in `full` is
// allowed only when no parameter has state (a checkpoint written before the
// first step). kInvalidArgument for optimizers of different kinds or group
// counts other than one; kFailedPrecondition when the parameters of one
// bucket have state of different step counts or kinds, or some have none:
// ZeRO steps a bucket's share as one tensor; kInternal for LibTorch's errors.
absl::Status ScatterShardedState(const torch::optim::Optimizer& full,
                                 zero::ShardedOptimizer& sharded);

}  // namespace dtrain::trainer

#endif  // DTRAIN_TRAINER_CHECKPOINT_SHARDED_STATE_H_
