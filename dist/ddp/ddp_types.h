// The value types of DistributedDataParallel's interface: its options, the
// bucket layout and the per-step statistics. Kept apart from ddp.h so that
// the reducer can fill them without depending on the wrapper; include ddp.h,
// which includes this file. Plain values: no thread safety of their own.
#ifndef DTRAIN_DIST_DDP_DDP_TYPES_H_
#define DTRAIN_DIST_DDP_DDP_TYPES_H_

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace dtrain::ddp {

// What SynchronizeGradients does with a parameter that received no gradient
// in a synchronised step.
enum class UnusedParameters {
  // It contributes its .grad, or zeros when undefined (PyTorch's
  // find_unused_parameters=True).
  kZero,
  // As kZero, then SynchronizeGradients fails on every rank with
  // kFailedPrecondition naming the parameters and the ranks where they went
  // unused. Costs one small extra allreduce per step.
  kError,
};

struct DdpOptions {
  // Caps on a bucket's gradient bytes; PyTorch's defaults.
  int64_t first_bucket_cap_bytes = int64_t{1} << 20;
  int64_t bucket_cap_bytes = int64_t{25} << 20;
  // Broadcast buffers (batch-norm statistics) from rank 0 in PrepareForward,
  // as PyTorch's broadcast_buffers.
  bool broadcast_buffers = true;
  // Broadcast rank 0's parameters and buffers at construction (PyTorch's
  // init_sync). False only when every rank already holds rank 0's values
  // bit for bit (all decoded the same checkpoint bytes), to spare a second
  // copy of the model over the network; the check that every rank has the
  // same model still runs.
  bool init_sync = true;
  UnusedParameters unused_parameters = UnusedParameters::kZero;
  // Each parameter's .grad is its slice of its bucket (PyTorch's
  // gradient_as_bucket_view): backward accumulates straight into the bucket
  // and the average lands in .grad in place, so no copy into the bucket or
  // back per step, and no second copy of the gradients in memory. Safe with
  // any optimizer: a .grad that was replaced or reset to undefined is copied
  // into the bucket and pointed back at it at the next backward (one copy
  // that step). To keep every step copy-free, zero gradients in place
  // (Module::zero_grad(/*set_to_none=*/false)) rather than resetting them.
  bool gradient_as_bucket_view = true;
  // The graph is the same every step (PyTorch's static_graph): the first
  // synchronised step learns which parameters get gradients and how many
  // (reentrant activation checkpointing gives some two); later steps launch
  // buckets with unused parameters at once and accept a parameter's repeated
  // gradients. A later step whose counts differ fails, on every rank, with
  // kFailedPrecondition naming the parameters, instead of averaging
  // incomplete gradients silently. The first step's buckets all go out at
  // its end (no overlap that step).
  bool static_graph = false;
  // Each bucket's allocation holds world_size * ceil(numel / world_size)
  // elements, the extra ones zero and never written by backward
  // (GradBucket::padded), so that a hook can reduce-scatter the bucket in
  // place in N equal shares: ZeRO stage 2 (dist/zero) needs it. At most
  // world_size - 1 elements more per bucket.
  bool pad_buckets_to_world_size = false;
  // Bounds each wait for a collective, on top of the backend's own timeout
  // (which already bounds every collective).
  absl::Duration timeout = absl::InfiniteDuration();
};

// A bucket as laid out at construction.
struct BucketInfo {
  int index = 0;
  // Parameter names in bucket order (reverse registration order).
  std::vector<std::string> parameters;
  int64_t numel = 0;
  c10::ScalarType dtype = c10::ScalarType::Float;
  // Where the bucket lives: its parameters' device.
  c10::Device device = c10::Device(c10::DeviceType::CPU);
  // Gradient bytes, and bytes on the wire per step with the registered
  // communication hook (half with float16 compression).
  int64_t bytes = 0;
  int64_t communicated_bytes = 0;
};

// One synchronised step, as measured on this rank.
struct StepStats {
  // Synchronised steps so far, this one included.
  int64_t step = 0;
  int num_buckets = 0;
  // The step's first gradient hook, on this host's clock (absl::Now): what
  // the offsets below count from.
  absl::Time first_hook = absl::InfinitePast();
  // Buckets launched by hooks during backward; the others were launched by
  // SynchronizeGradients (their parameters had no gradient in backward).
  int buckets_launched_in_backward = 0;
  // From the first gradient hook of the step (close to the start of backward)
  // to the launch of the last bucket.
  absl::Duration backward_until_last_launch;
  // Time spent inside the gradient hooks: copies into buckets and launches.
  absl::Duration hooks;
  // Blocked in SynchronizeGradients waiting for collectives: communication
  // that backward did not hide.
  absl::Duration exposed_communication;
  // All of SynchronizeGradients: launches, waits and copies into .grad.
  absl::Duration synchronize;
  // Buffer broadcasts in PrepareForward since the previous step.
  absl::Duration buffer_broadcast;
  // From the first gradient hook to the last: backward's span as DDP sees it
  // (its compute before the first hook is not included).
  absl::Duration backward_until_last_gradient;
  // Per bucket: gradient bytes and how long after the step's first hook it was
  // launched.
  std::vector<int64_t> bucket_bytes;
  std::vector<absl::Duration> bucket_launch_offsets;
  // Per bucket, after the step's first hook: when its allreduce started
  // running (after the collectives before it) and finished. Empty where the
  // backend does not time its collectives on the host (backend::Work::times).
  std::vector<absl::Duration> bucket_start_offsets;
  std::vector<absl::Duration> bucket_finish_offsets;
  // Parameters that received no gradient this step, on this rank.
  std::vector<std::string> unused_parameters;
};

}  // namespace dtrain::ddp

#endif  // DTRAIN_DIST_DDP_DDP_TYPES_H_
