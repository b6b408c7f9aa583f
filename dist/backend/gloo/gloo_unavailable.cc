// CreateGlooBackend in a build without Gloo: the CMake build links this in
// place of gloo_backend.cc when find_package(Gloo) finds none (a pip torch on a
// GPU machine, say), so that the factory, the trainer and the launcher still
// build, and asking for Gloo says why it cannot be had.
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "dist/backend/gloo/gloo_backend.h"

namespace dtrain::backend {

bool GlooBuilt() { return false; }

absl::StatusOr<std::unique_ptr<Backend>> CreateGlooBackend(
    const Membership& group, const GlooBackendOptions& options) {
  // Bad arguments are named as such whatever the build has.
  const std::string who =
      absl::StrCat("[rank ", group.rank, "] ", options.name);
  DTRAIN_RETURN_IF_ERROR(group.Check(who));
  return absl::FailedPreconditionError(absl::StrCat(
      who,
      ": this build of dtrain has no Gloo (CMake found none when the build "
      "was configured), so ranks on different hosts cannot reach each other "
      "over TCP; ranks of one host share memory (backend 'gloo' or 'shm'), "
      "GPUs use 'nccl'. For Gloo, install it (Debian: libgloo-dev) or point "
      "CMAKE_PREFIX_PATH at one, and configure again"));
}

}  // namespace dtrain::backend
