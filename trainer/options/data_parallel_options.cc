#include "trainer/options/data_parallel_options.h"

#include <algorithm>
#include <cmath>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/machine_limits.h"
#include "base/status_macros.h"
#include "trainer/options/common.h"

namespace dtrain::trainer {

using options_internal::Invalid;

absl::Status ValidateDataParallelOptions(const DataParallelOptions& o) {
  // Checked as a double, before the trainer converts it to bytes.
  DTRAIN_RETURN_IF_ERROR(base::CheckFiniteSize(
      "--bucket_cap_mb", o.bucket_cap_mb, 1 << 20, "MiB"));
  if (std::find(std::begin(kCommHooks), std::end(kCommHooks), o.comm_hook) ==
      std::end(kCommHooks)) {
    return Invalid("comm_hook",
                   absl::StrCat("'", o.comm_hook, "' is not one of ",
                                absl::StrJoin(kCommHooks, ", ")));
  }
  if (o.powersgd_rank < 1) {
    return Invalid("powersgd_rank", "the matrix rank must be 1 or more");
  }
  if (o.powersgd_start_step < 0) {
    return Invalid("powersgd_start_step", "must be 0 or more");
  }
  if (o.comm_hook == "powersgd" && o.powersgd_start_step < 2 &&
      (o.powersgd_error_feedback || o.powersgd_warm_start)) {
    return Invalid("powersgd_start_step",
                   "must be at least 2 with error feedback or warm start "
                   "(PyTorch's rule for start_powerSGD_iter)");
  }
  if (o.powersgd_seed < 0 || o.powersgd_seed > 0xFFFFFFFFll) {
    return Invalid("powersgd_seed", "must be in 0 .. 2^32 - 1 (numpy's seeds)");
  }
  if (!(o.powersgd_min_compression_rate >= 1) ||
      !std::isfinite(o.powersgd_min_compression_rate)) {
    return Invalid("powersgd_min_compression_rate",
                   "must be a finite number of at least 1");
  }
  if (o.local_sgd_start_step < 0) {
    return Invalid("local_sgd_start_step", "must be 0 or more");
  }
  if (o.local_sgd_period < 1) {
    return Invalid("local_sgd_period", "must be 1 or more");
  }
  if (o.comm_hook != "allreduce" && !o.sync_gradients) {
    return Invalid("comm_hook",
                   "a communication hook averages gradients; "
                   "--sync_gradients=false averages none");
  }
  if (o.zero < 0 || o.zero > 2) {
    return Invalid("zero",
                   "must be 0 (off), 1 (optimizer state sharded) or 2 "
                   "(gradients too)");
  }
  if (o.zero > 0 && !o.sync_gradients) {
    return Invalid("zero",
                   "shards the optimizer of ranks that average gradients; "
                   "--sync_gradients=false averages none");
  }
  if (o.zero > 0 && o.comm_hook == "local_sgd") {
    // Stepping shares needs one replica; post-local SGD lets them drift.
    return Invalid("zero",
                   "keeps one replica of the parameters, which "
                   "--comm_hook=local_sgd lets drift apart between averages: "
                   "the two do not combine");
  }
  if (o.zero == 2 && o.comm_hook != "allreduce") {
    return Invalid("zero",
                   absl::StrCat("=2 averages the gradients with its own "
                                "reduce-scatter, so --comm_hook=",
                                o.comm_hook,
                                " cannot be combined with it (--zero=1 can)"));
  }
  if (o.sync_batchnorm && !o.sync_gradients)
    return Invalid("sync_batchnorm",
                   "communicates batch statistics; --sync_gradients=false "
                   "measures training without communication");
  return absl::OkStatus();
}

}  // namespace dtrain::trainer
