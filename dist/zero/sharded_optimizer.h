// ZeRO stages 1 and 2 (Rajbhandari et al., 2019) on DistributedDataParallel's
// buckets, as PyTorch's ZeroRedundancyOptimizer (stage 1) with
// parameters_as_bucket_view: each rank keeps the optimizer state of, and
// steps, only its share of every bucket (shard_layout.h: 1/N of it), then
// the ranks allgather the updated parameters.
//
//   ddp::DdpOptions options;
//   options.pad_buckets_to_world_size = true;  // stage 2's in-place scatter
//   ... DistributedDataParallel::Create(module, backend, options) ...
//   DTRAIN_ASSIGN_OR_RETURN(
//       std::unique_ptr<zero::ShardedOptimizer> zero,
//       zero::ShardedOptimizer::Create(*ddp, {/*stage=*/2},
//           [](std::vector<at::Tensor> shares) {
//             return std::make_unique<torch::optim::Adam>(
//                 shares, torch::optim::AdamOptions(1e-3));
//           }));
//   for (...) {  // every step:
//     DTRAIN_RETURN_IF_ERROR(ddp->PrepareForward());
//     loss(model->forward(x)).backward();
//     DTRAIN_RETURN_IF_ERROR(ddp->SynchronizeGradients());
//     DTRAIN_RETURN_IF_ERROR(zero->Step());
//     model->zero_grad(/*set_to_none=*/false);
//   }
//
// Stage 1: DDP averages the gradients with its hook, as without ZeRO; Step
// steps this rank's share of each bucket's gradients as a view of DDP's
// bucket (with gradient_as_bucket_view; copied out of .grad without it).
// Stage 2: Create registers a ReduceScatterHook (reduce_scatter_hook.h):
// each bucket is reduce-scattered in place as backward fills it and only this
// rank's share is averaged, half an allreduce's bytes on the wire and no
// memory beyond DDP's buckets; .grad then holds unspecified values outside
// this rank's share. A DDP with another hook registered, or without
// DdpOptions::pad_buckets_to_world_size, is refused for stage 2.
//
// Parameters: Create moves each bucket's parameters into one flat tensor per
// bucket (padded to N shares; shared memory on CPU, where the shm backend's
// allgather into it copies nothing) with set_data, so the module's
// parameters stay the same tensors. The optimizer the factory makes sees one
// tensor per bucket, this rank's share (empty shares left out). With an
// element-wise optimizer (SGD with momentum, Adam, AdamW, Adadelta) each
// element is stepped as over the whole model, so the parameters follow
// unsharded DDP's: bit for bit at stage 1, where the gradients are DDP's
// own; at stage 2 within the reduce-scatter's rounding (the shm backend's
// reduce-scatter has its allreduce's bits; Gloo's ring sums in another
// order). An optimizer that looks across elements (LBFGS, a global norm)
// would see only the share.
//
// Thread safety: none; the training thread only. Ordering: Create and Step
// are collectives on DDP's backend: every rank calls them in the same order,
// relative to DDP's own collectives too. Lifetimes: the DDP, its module and
// its backend outlive this object.
#ifndef DTRAIN_DIST_ZERO_SHARDED_OPTIMIZER_H_
#define DTRAIN_DIST_ZERO_SHARDED_OPTIMIZER_H_

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dist/backend/small_collectives.h"
#include "dist/ddp/ddp.h"
#include "dist/zero/reduce_scatter_hook.h"
#include "dist/zero/shard_layout.h"

namespace dtrain::zero {

struct ShardedOptimizerOptions {
  // 1: the optimizer state is sharded; 2: the gradients' averaging too.
  int stage = 1;
};

// Makes the optimizer for this rank's shares (one tensor per bucket).
using ShardOptimizerFactory =
    std::function<std::unique_ptr<torch::optim::Optimizer>(
        std::vector<at::Tensor> shares)>;

class ShardedOptimizer {
 public:
  // Collective. Call after DDP's Create and before the first synchronised
  // step. kInvalidArgument for a stage other than 1 or 2, a stage-2 DDP with
  // a hook of its own or without padded buckets, or a factory that makes no
  // optimizer; the backend's error when allocating fails.
  static absl::StatusOr<std::unique_ptr<ShardedOptimizer>> Create(
      ddp::DistributedDataParallel& ddp, const ShardedOptimizerOptions& options,
      const ShardOptimizerFactory& make_optimizer);

  // After SynchronizeGradients: steps this rank's shares and allgathers the
  // parameters. Errors name the bucket and the rank; after one, the
  // parameters are not to be trusted (as after a failed DDP step).
  absl::Status Step();

  // Stage 2, where the averaged gradients are only the shares' .grad: what
  // mixed precision unscales and checks, and clipping clips, instead of the
  // parameters. At stage 1, DDP's parameters (their .grad averaged as without
  // ZeRO) are, and these are unused. This rank's non-empty shares.
  std::vector<at::Tensor> StepGradientShares() const;
  // Collective at stage 2 (one small allreduce): whether `mine` holds on any
  // rank, for a decision every rank must take alike (a non-finite gradient
  // in some rank's share skips the step everywhere). At stage 1 the ranks
  // already agree, and `mine` is returned.
  absl::StatusOr<bool> AnyRank(bool mine);
  // Collective at stage 2 (one small allreduce): clip_grad_norm_ over the
  // gradients of every rank's shares: their total 2-norm, and each share's
  // gradient scaled by max_norm / (norm + 1e-6) when that is below 1.
  // Returns the norm before clipping. kFailedPrecondition at stage 1, where
  // clip_grad_norm_ over the parameters does the same.
  absl::StatusOr<double> ClipShareGradNorm(double max_norm);

  // The shares' optimizer: its learning rates, state and checkpoints.
  torch::optim::Optimizer& optimizer() { return *optimizer_; }
  // This rank's shares of the parameters, one per bucket (some empty).
  const std::vector<at::Tensor>& shares() const { return shares_; }
  // Elements this rank steps: the sum of its shares' lengths.
  int64_t shard_numel() const;
  int stage() const { return options_.stage; }
  // Where each bucket's shares lie (shard_layout.h), in bucket order.
  const std::vector<BucketShard>& shards() const { return shards_; }
  // Each bucket's parameters (the module's tensors), in bucket order.
  const std::vector<std::vector<at::Tensor>>& bucket_parameters() const {
    return params_;
  }
  ddp::DistributedDataParallel& ddp() const { return ddp_; }

 private:
  // Stage 1: this rank's share of bucket `b`'s averaged gradients as a view
  // of DDP's bucket, when every parameter's .grad in the share is a slice of
  // it (gradient_as_bucket_view); otherwise undefined.
  at::Tensor BucketGradientShare(size_t b) const;
  // The small collectives of AnyRank and ClipShareGradNorm.
  backend::SmallCollectives Sync() const;

  ShardedOptimizer(ddp::DistributedDataParallel& ddp,
                   const ShardedOptimizerOptions& options)
      : ddp_(ddp), options_(options) {}

  ddp::DistributedDataParallel& ddp_;
  const ShardedOptimizerOptions options_;
  std::vector<BucketShard> shards_;
  // Per bucket: its parameters in bucket order, the flat padded parameter
  // tensor they now live in, its N parts, and this rank's share of it.
  std::vector<std::vector<at::Tensor>> params_;
  std::vector<at::Tensor> flat_;
  std::vector<std::vector<at::Tensor>> parts_;
  std::vector<at::Tensor> shares_;
  // Stage 1: each share's gradient where .grad is not DDP's bucket (copied
  // out of .grad every step); undefined while not needed.
  std::vector<at::Tensor> grads_;
  std::shared_ptr<ReduceScatterHook> hook_;  // stage 2
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
};

}  // namespace dtrain::zero

#endif  // DTRAIN_DIST_ZERO_SHARDED_OPTIMIZER_H_
