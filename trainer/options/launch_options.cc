#include "trainer/options/launch_options.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/machine_limits.h"
#include "base/status_macros.h"
#include "dist/backend/backend_names.h"
#include "dist/backend/device_choice.h"
#include "trainer/options/common.h"

namespace dtrain::trainer {

using options_internal::Invalid;
using options_internal::Known;

absl::Status ValidateLaunchOptions(const LaunchOptions& o) {
  if (!Known(backend::KnownBackends(), o.dist_backend)) {
    return Invalid(
        "dist_backend",
        absl::StrCat("unknown backend '", o.dist_backend, "'; known: ",
                     absl::StrJoin(backend::KnownBackends(), ", ")));
  }
  if (!o.shm && o.dist_backend != "gloo") {
    return Invalid("shm", absl::StrCat("--shm=false applies to the gloo "
                                       "backend, not ",
                                       o.dist_backend));
  }
  if (!absl::StartsWith(o.dist_url, "tcp://") &&
      !absl::StartsWith(o.dist_url, "file://") &&
      !absl::StartsWith(o.dist_url, "env://")) {
    return Invalid("dist_url", absl::StrCat("'", o.dist_url,
                                            "' is not tcp://host:port, "
                                            "file:///path or env://"));
  }
  if (o.timeout <= absl::ZeroDuration())
    return Invalid("timeout", "must be > 0");
  DTRAIN_RETURN_IF_ERROR(backend::ParseDevice(o.device).status());
  if (o.dist_backend == "nccl" && o.device == "cpu")
    return Invalid("dist_backend", "nccl needs --device=cuda");
  if (o.dist_backend != "nccl" && o.device != "cpu") {
    return Invalid("dist_backend",
                   absl::StrCat("the ", o.dist_backend,
                                " backend reduces CPU tensors; use nccl with "
                                "--device=cuda"));
  }
  if (o.intra_op_threads < 1)
    return Invalid("intra_op_threads", "must be >= 1");
  DTRAIN_RETURN_IF_ERROR(base::CheckAtMost(
      "--intra_op_threads", o.intra_op_threads, base::ThreadLimit()));
  return absl::OkStatus();
}

}  // namespace dtrain::trainer
