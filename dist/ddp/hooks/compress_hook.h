// Gradient compression hooks, as PyTorch's fp16_compress_hook and
// bf16_compress_hook: each float32 or float64 bucket is cast to float16 (or
// bfloat16), divided by the world size, summed over ranks and cast back.
// Half the bytes of float32 on the wire, with about three significant
// digits (float16: 11 bits; bfloat16: 8 bits, float32's range). Buckets
// already in a 16-bit dtype are averaged as they are. On Gloo, which has no
// bfloat16 reduction, bfloat16 travels widened to float32 (no saving); the
// shared-memory and NCCL backends carry it as is.
//
// Setup allocates one compressed buffer per bucket (through
// Backend::AllocateBuffer for CPU buckets, so that the shm backend reduces
// it in place). Stateless otherwise.
#ifndef DTRAIN_DIST_DDP_HOOKS_COMPRESS_HOOK_H_
#define DTRAIN_DIST_DDP_HOOKS_COMPRESS_HOOK_H_

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <memory>
#include <string>
#include <vector>

#include "dist/ddp/comm_hook.h"

namespace dtrain::ddp::hooks {

class CompressHook : public CommHook {
 public:
  // `wire`: at::kHalf or at::kBFloat16.
  explicit CompressHook(at::ScalarType wire) : wire_(wire) {}

  std::string name() const override;
  absl::Status Setup(const std::vector<GradBucket>& buckets,
                     backend::Backend& backend) override;
  int64_t CommunicatedBytes(const GradBucket& bucket) const override;
  std::unique_ptr<BucketWork> Launch(GradBucket& bucket,
                                     BucketComm& comm) override;

 private:
  at::ScalarType wire_;
  // Per bucket: the compressed buffer, undefined where the bucket is not
  // compressed.
  std::vector<at::Tensor> compressed_;
};

// PyTorch's fp16_compress_hook and bf16_compress_hook.
std::shared_ptr<CommHook> Fp16CompressHook();
std::shared_ptr<CommHook> Bf16CompressHook();

}  // namespace dtrain::ddp::hooks

#endif  // DTRAIN_DIST_DDP_HOOKS_COMPRESS_HOOK_H_
