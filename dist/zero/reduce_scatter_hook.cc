#include "dist/zero/reduce_scatter_hook.h"

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace dtrain::zero {
namespace {

// Waits for the reduce-scatter.
class ScatterWork : public ddp::BucketWork {
 public:
  ScatterWork(ddp::BucketComm& comm, std::shared_ptr<backend::Work> work)
      : comm_(comm), work_(std::move(work)) {}
  absl::StatusOr<Progress> Continue() override {
    DTRAIN_RETURN_IF_ERROR(comm_.Wait(*work_, "reduce_scatter"));
    return Progress::kDone;
  }

 private:
  ddp::BucketComm& comm_;
  std::shared_ptr<backend::Work> work_;
};

}  // namespace

absl::Status ReduceScatterHook::Setup(
    const std::vector<ddp::GradBucket>& buckets, backend::Backend& backend) {
  if (buckets.size() != shards_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("reduce_scatter hook: planned for ", shards_.size(),
                     " buckets, DDP has ", buckets.size()));
  }
  rank_ = backend.rank();
  const int world = backend.size();
  for (size_t b = 0; b < buckets.size(); ++b) {
    const ddp::GradBucket& bucket = buckets[b];
    const at::Tensor& buffer = bucket.buffer;
    const BucketShard& s = shards_[b];
    if (buffer.numel() != s.numel) {
      return absl::InvalidArgumentError(
          absl::StrCat("reduce_scatter hook: bucket ", b, " has ",
                       buffer.numel(), " elements, planned for ", s.numel));
    }
    if (bucket.padded.numel() != world * s.share) {
      return absl::InvalidArgumentError(absl::StrCat(
          "reduce_scatter hook: bucket ", b, " is allocated with ",
          bucket.padded.numel(), " elements, not ", world, " shares of ",
          s.share,
          ": create DDP with DdpOptions::pad_buckets_to_world_size, "
          "so that the reduce-scatter runs in place"));
    }
    std::vector<at::Tensor> parts;
    for (int r = 0; r < world; ++r) {
      parts.push_back(bucket.padded.narrow(0, r * s.share, s.share));
    }
    shares_.push_back(parts[rank_].narrow(0, 0, s.length));
    parts_.push_back(std::move(parts));
  }
  return absl::OkStatus();
}

int64_t ReduceScatterHook::CommunicatedBytes(
    const ddp::GradBucket& bucket) const {
  // Each rank sends (N-1)/N of the bucket once; an allreduce twice that.
  return bucket.buffer.numel() *
         static_cast<int64_t>(bucket.buffer.element_size()) / 2;
}

std::unique_ptr<ddp::BucketWork> ReduceScatterHook::Launch(
    ddp::GradBucket& bucket, ddp::BucketComm& comm) {
  const int b = bucket.index;
  // In place: this rank's share is one of the inputs, and the padding past
  // the bucket's gradients is zero on every rank.
  return std::make_unique<ScatterWork>(
      comm, comm.ReduceScatter(parts_[b][rank_], parts_[b],
                               backend::ReduceOp::kAverage, "reduce_scatter"));
}

}  // namespace dtrain::zero
