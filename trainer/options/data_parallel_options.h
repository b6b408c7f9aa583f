// The data-parallel section of train's options: DDP's knobs
// (--bucket_cap_mb, --gradient_as_bucket_view, --static_graph), its
// communication hook and the hook's knobs (--comm_hook, --powersgd_*,
// --local_sgd_*), whether gradients are averaged at all, SyncBatchNorm, and
// ZeRO (--zero).
// Consumed by run_parts (MakeDdpOptions, MakeCommHook, BuildModel). A plain
// value type.
#ifndef DTRAIN_TRAINER_OPTIONS_DATA_PARALLEL_OPTIONS_H_
#define DTRAIN_TRAINER_OPTIONS_DATA_PARALLEL_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace dtrain::trainer {

struct DataParallelOptions {
  // DDP's gradient bucket caps, in MiB (PyTorch's bucket_cap_mb).
  double bucket_cap_mb = 25;
  // DDP's communication hook (dist/ddp/hooks/): "allreduce" (the default),
  // "fp16" or "bf16" (float32 gradients sent as 16-bit, divided by the world
  // size before the sum: half the bytes), "powersgd" (low-rank
  // approximation with error feedback) or "local_sgd" (post-local SGD:
  // gradients averaged for local_sgd_start_step steps, then parameters every
  // local_sgd_period steps). --fp16_allreduce is another name for "fp16".
  std::string comm_hook = "allreduce";
  // PowerSGD's knobs, as PyTorch's PowerSGDState.
  int64_t powersgd_rank = 1;
  int64_t powersgd_start_step = 1000;
  double powersgd_min_compression_rate = 2;
  bool powersgd_error_feedback = true;
  bool powersgd_warm_start = true;
  int64_t powersgd_seed = 0;
  // Post-local SGD's knobs: PyTorch's start_localSGD_iter (also the model
  // averager's warm-up) and the averager's period.
  int64_t local_sgd_start_step = 100;
  int64_t local_sgd_period = 4;
  // DDP's gradient_as_bucket_view and static_graph (dist/ddp/ddp_types.h).
  bool gradient_as_bucket_view = true;
  bool static_graph = false;
  // false trains every rank on its shard without averaging gradients: the
  // no-communication bound the experiment runner compares against. Not a
  // way to train a model.
  bool sync_gradients = true;
  // ResNet-18's batch norms as SyncBatchNorm (dist/ddp/sync_batch_norm.h):
  // statistics over the global batch. No effect with one rank, or on a model
  // without batch norm (the ConvNet; the trainer says so).
  bool sync_batchnorm = false;
  // ZeRO (dist/zero/sharded_optimizer.h): 0 off; 1 each rank keeps and steps
  // 1/N of the optimizer state; 2 the gradients are reduce-scattered too.
  int zero = 0;
};

// The hooks --comm_hook takes, in the order --help lists them.
inline constexpr const char* kCommHooks[] = {"allreduce", "fp16", "bf16",
                                             "powersgd", "local_sgd"};

// kInvalidArgument naming the flag.
absl::Status ValidateDataParallelOptions(const DataParallelOptions& o);

}  // namespace dtrain::trainer

#endif  // DTRAIN_TRAINER_OPTIONS_DATA_PARALLEL_OPTIONS_H_
