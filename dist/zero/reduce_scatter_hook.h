// ZeRO stage 2's communication hook (sharded_optimizer.h registers it): each
// bucket is reduce-scattered as soon as backward fills it, so each rank
// receives the average of its own share only, and the wire carries half of
// an allreduce's bytes. The reduce-scatter runs in place in DDP's bucket,
// allocated padded to N shares (DdpOptions::pad_buckets_to_world_size): no
// copy and no second buffer. The average lands in this rank's share of the
// bucket (share()); the rest of the bucket, and so of .grad, is left with
// unspecified values (the local gradients, or partial sums).
//
// Thread safety and lifetimes: as every CommHook (comm_hook.h).
#ifndef DTRAIN_DIST_ZERO_REDUCE_SCATTER_HOOK_H_
#define DTRAIN_DIST_ZERO_REDUCE_SCATTER_HOOK_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "dist/ddp/comm_hook.h"
#include "dist/zero/shard_layout.h"

namespace dtrain::zero {

class ReduceScatterHook : public ddp::CommHook {
 public:
  // `shards`: this rank's (PlanShards), one per DDP bucket. Setup fails
  // with kInvalidArgument on a DDP without padded buckets.
  explicit ReduceScatterHook(std::vector<BucketShard> shards)
      : shards_(std::move(shards)) {}

  std::string name() const override { return "reduce_scatter"; }
  absl::Status Setup(const std::vector<ddp::GradBucket>& buckets,
                     backend::Backend& backend) override;
  int64_t CommunicatedBytes(const ddp::GradBucket& bucket) const override;
  std::unique_ptr<ddp::BucketWork> Launch(ddp::GradBucket& bucket,
                                          ddp::BucketComm& comm) override;

  // After Setup: this rank's share of bucket `b`'s averaged gradients
  // (BucketShard::length elements), valid once the bucket's work is done;
  // the same tensor every step.
  const at::Tensor& share(int b) const { return shares_[b]; }

 private:
  const std::vector<BucketShard> shards_;
  int rank_ = 0;
  std::vector<std::vector<at::Tensor>> parts_;  // per bucket, per rank
  std::vector<at::Tensor> shares_;              // per bucket
};

}  // namespace dtrain::zero

#endif  // DTRAIN_DIST_ZERO_REDUCE_SCATTER_HOOK_H_
