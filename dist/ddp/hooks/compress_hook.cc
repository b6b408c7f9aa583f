#include "dist/ddp/hooks/compress_hook.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/torch_guard.h"
#include "dist/ddp/hooks/allreduce_hook.h"

namespace dtrain::ddp::hooks {
namespace {

bool Compressible(const at::Tensor& buffer) {
  return buffer.scalar_type() == at::kFloat ||
         buffer.scalar_type() == at::kDouble;
}

// Waits for the compressed sum and casts it back into the bucket.
class DecompressWork : public BucketWork {
 public:
  DecompressWork(BucketComm& comm, std::shared_ptr<backend::Work> work,
                 std::string stage, at::Tensor compressed, at::Tensor buffer,
                 absl::Status local)
      : comm_(comm),
        work_(std::move(work)),
        stage_(std::move(stage)),
        compressed_(std::move(compressed)),
        buffer_(std::move(buffer)),
        local_(std::move(local)) {}

  absl::StatusOr<Progress> Continue() override {
    DTRAIN_RETURN_IF_ERROR(comm_.Wait(*work_, stage_));
    DTRAIN_RETURN_IF_ERROR(local_);
    DTRAIN_RETURN_IF_ERROR(
        base::GuardTorch(absl::StatusCode::kInternal, "LibTorch: ", [&] {
          at::NoGradGuard no_grad;
          buffer_.copy_(compressed_);
          return absl::OkStatus();
        }));
    return Progress::kDone;
  }

 private:
  BucketComm& comm_;
  std::shared_ptr<backend::Work> work_;
  std::string stage_;
  at::Tensor compressed_;
  at::Tensor buffer_;
  absl::Status local_;
};

}  // namespace

std::string CompressHook::name() const {
  return wire_ == at::kBFloat16 ? "bf16" : "fp16";
}

absl::Status CompressHook::Setup(const std::vector<GradBucket>& buckets,
                                 backend::Backend& backend) {
  if (wire_ != at::kHalf && wire_ != at::kBFloat16) {
    return absl::InvalidArgumentError(
        absl::StrCat("compression to ", c10::toString(wire_),
                     " is not supported: float16 or bfloat16"));
  }
  compressed_.clear();
  for (const GradBucket& b : buckets) {
    if (!Compressible(b.buffer)) {
      compressed_.emplace_back();
      continue;
    }
    if (b.buffer.is_cpu()) {
      // Every rank has the same buckets, so the same allocations in the
      // same order (a collective on the shm backend).
      DTRAIN_ASSIGN_OR_RETURN(at::Tensor t,
                              backend.AllocateBuffer(b.buffer.numel(), wire_));
      compressed_.push_back(std::move(t));
    } else {
      compressed_.push_back(
          at::zeros({b.buffer.numel()}, b.buffer.options().dtype(wire_)));
    }
  }
  return absl::OkStatus();
}

int64_t CompressHook::CommunicatedBytes(const GradBucket& bucket) const {
  const int64_t element =
      Compressible(bucket.buffer)
          ? c10::elementSize(wire_)
          : static_cast<int64_t>(bucket.buffer.element_size());
  return bucket.buffer.numel() * element;
}

std::unique_ptr<BucketWork> CompressHook::Launch(GradBucket& bucket,
                                                 BucketComm& comm) {
  const at::Tensor& compressed = compressed_.at(bucket.index);
  if (!compressed.defined()) {
    return std::make_unique<WaitWork>(
        comm,
        comm.AllReduce(bucket.buffer, backend::ReduceOp::kAverage, "allreduce"),
        "allreduce");
  }
  absl::Status local =
      base::GuardTorch(absl::StatusCode::kInternal, "LibTorch: ", [&] {
        at::NoGradGuard no_grad;
        // PyTorch's order: cast, then divide, then sum.
        compressed.copy_(bucket.buffer);
        compressed.div_(comm.world_size());
        return absl::OkStatus();
      });
  const std::string stage = absl::StrCat(name(), " allreduce");
  // Issued even when compressing failed, so the other ranks are not left
  // waiting; the failure comes back from Continue.
  std::shared_ptr<backend::Work> work =
      comm.AllReduce(compressed, backend::ReduceOp::kSum, stage);
  return std::make_unique<DecompressWork>(comm, std::move(work), stage,
                                          compressed, bucket.buffer,
                                          std::move(local));
}

std::shared_ptr<CommHook> Fp16CompressHook() {
  return std::make_shared<CompressHook>(at::kHalf);
}

std::shared_ptr<CommHook> Bf16CompressHook() {
  return std::make_shared<CompressHook>(at::kBFloat16);
}

}  // namespace dtrain::ddp::hooks
