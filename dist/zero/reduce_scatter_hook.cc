#include "dist/zero/reduce_scatter_hook.h"

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/torch_guard.h"

namespace dtrain::zero {
namespace {

// Waits for the reduce-scatter; a local failure (copying into the scratch
// bucket) is reported once the collective, issued regardless, is done.
class ScatterWork : public ddp::BucketWork {
 public:
  ScatterWork(ddp::BucketComm& comm, std::shared_ptr<backend::Work> work,
              absl::Status local)
      : comm_(comm), work_(std::move(work)), local_(std::move(local)) {}
  absl::StatusOr<Progress> Continue() override {
    const absl::Status waited = comm_.Wait(*work_, "reduce_scatter");
    DTRAIN_RETURN_IF_ERROR(local_);
    DTRAIN_RETURN_IF_ERROR(waited);
    return Progress::kDone;
  }

 private:
  ddp::BucketComm& comm_;
  std::shared_ptr<backend::Work> work_;
  absl::Status local_;
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
    const at::Tensor& buffer = buckets[b].buffer;
    const BucketShard& s = shards_[b];
    if (buffer.numel() != s.numel) {
      return absl::InvalidArgumentError(
          absl::StrCat("reduce_scatter hook: bucket ", b, " has ",
                       buffer.numel(), " elements, planned for ", s.numel));
    }
    at::Tensor scratch;
    if (buffer.is_cuda()) {
      scratch = at::zeros({world * s.share}, buffer.options());
    } else {
      DTRAIN_ASSIGN_OR_RETURN(
          scratch,
          backend.AllocateBuffer(world * s.share, buffer.scalar_type()));
    }
    std::vector<at::Tensor> parts;
    for (int r = 0; r < world; ++r) {
      parts.push_back(scratch.narrow(0, r * s.share, s.share));
    }
    shares_.push_back(parts[rank_].narrow(0, 0, s.length));
    parts_.push_back(std::move(parts));
    scratch_.push_back(std::move(scratch));
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
  // A LibTorch error here must not leave the other ranks waiting: the
  // collective is issued anyway and the failure reported by its wait.
  absl::Status copied = base::GuardTorch(
      absl::StatusCode::kInternal,
      absl::StrCat("copying ", bucket.description, " to reduce-scatter it: "),
      [&]() -> absl::Status {
        scratch_[b]
            .narrow(0, 0, bucket.buffer.numel())
            .copy_(bucket.buffer.view({-1}));
        return absl::OkStatus();
      });
  std::shared_ptr<backend::Work> work =
      comm.ReduceScatter(parts_[b][rank_], parts_[b],
                         backend::ReduceOp::kAverage, "reduce_scatter");
  return std::make_unique<ScatterWork>(comm, std::move(work),
                                       std::move(copied));
}

}  // namespace dtrain::zero
