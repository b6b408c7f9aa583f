// ZeRO stage 2's communication hook (sharded_optimizer.h registers it): each
// bucket is reduce-scattered as soon as backward fills it, so each rank
// receives the average of its own share only, and the wire carries half of
// an allreduce's bytes. The bucket is copied into a padded scratch bucket
// first (shared memory on CPU: the shm backend's reduce-scatter then copies
// nothing); the average lands in this rank's share of it (share()). The
// bucket's own buffer, and so .grad, keeps the local gradients.
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
  // `shards`: this rank's (PlanShards), one per DDP bucket.
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
  std::vector<at::Tensor> scratch_;             // per bucket, padded
  std::vector<std::vector<at::Tensor>> parts_;  // per bucket, per rank
  std::vector<at::Tensor> shares_;              // per bucket
};

}  // namespace dtrain::zero

#endif  // DTRAIN_DIST_ZERO_REDUCE_SCATTER_HOOK_H_
