// The data-parallel section of train's options: DDP's knobs
// (--bucket_cap_mb, --fp16_allreduce), whether gradients are averaged at all,
// and SyncBatchNorm. Consumed by run_parts (MakeDdpOptions, BuildModel). A
// plain value type.
#ifndef DTRAIN_TRAINER_OPTIONS_DATA_PARALLEL_OPTIONS_H_
#define DTRAIN_TRAINER_OPTIONS_DATA_PARALLEL_OPTIONS_H_

#include "absl/status/status.h"

namespace dtrain::trainer {

struct DataParallelOptions {
  // DDP's gradient bucket caps, in MiB (PyTorch's bucket_cap_mb).
  double bucket_cap_mb = 25;
  // DDP sends float32 gradients as float16, divided by the world size before
  // the sum (PyTorch's fp16_compress_hook): half the bytes.
  bool fp16_allreduce = false;
  // false trains every rank on its shard without averaging gradients: the
  // no-communication bound the experiment runner compares against. Not a
  // way to train a model.
  bool sync_gradients = true;
  // ResNet-18's batch norms as SyncBatchNorm (dist/ddp/sync_batch_norm.h):
  // statistics over the global batch. No effect with one rank, or on a model
  // without batch norm (the ConvNet; the trainer says so).
  bool sync_batchnorm = false;
};

// kInvalidArgument naming the flag.
absl::Status ValidateDataParallelOptions(const DataParallelOptions& o);

}  // namespace dtrain::trainer

#endif  // DTRAIN_TRAINER_OPTIONS_DATA_PARALLEL_OPTIONS_H_
