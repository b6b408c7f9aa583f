// The data-parallel section's flags
// (trainer/options/data_parallel_options.h).

#include "absl/flags/flag.h"
#include "trainer/flags/train_flags.h"

ABSL_FLAG(double, bucket_cap_mb, 25, "DDP gradient bucket size in MiB.");
ABSL_FLAG(bool, fp16_allreduce, false,
          "DDP sends gradients as float16 (half the bytes, about three "
          "significant digits).");
ABSL_FLAG(bool, sync_gradients, true,
          "false: no gradient averaging (measures the no-communication "
          "bound; not a way to train).");
ABSL_FLAG(bool, sync_batchnorm, false,
          "Batch norm statistics over every rank's batch (PyTorch's "
          "SyncBatchNorm): resnet18 trains as one process on the global "
          "batch. No effect on convnet (no batch norm).");

namespace dtrain::trainer {

absl::Status ReadDataParallelFlags(DataParallelOptions* o) {
  o->bucket_cap_mb = absl::GetFlag(FLAGS_bucket_cap_mb);
  o->fp16_allreduce = absl::GetFlag(FLAGS_fp16_allreduce);
  o->sync_gradients = absl::GetFlag(FLAGS_sync_gradients);
  o->sync_batchnorm = absl::GetFlag(FLAGS_sync_batchnorm);
  return absl::OkStatus();
}

}  // namespace dtrain::trainer
