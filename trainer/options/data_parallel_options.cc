#include "trainer/options/data_parallel_options.h"

#include "base/machine_limits.h"
#include "base/status_macros.h"
#include "trainer/options/common.h"

namespace dtrain::trainer {

using options_internal::Invalid;

absl::Status ValidateDataParallelOptions(const DataParallelOptions& o) {
  // Checked as a double, before the trainer converts it to bytes.
  DTRAIN_RETURN_IF_ERROR(base::CheckFiniteSize(
      "--bucket_cap_mb", o.bucket_cap_mb, 1 << 20, "MiB"));
  if (o.sync_batchnorm && !o.sync_gradients)
    return Invalid("sync_batchnorm",
                   "communicates batch statistics; --sync_gradients=false "
                   "measures training without communication");
  return absl::OkStatus();
}

}  // namespace dtrain::trainer
