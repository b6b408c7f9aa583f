#include "dist/backend/device_choice.h"

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace dtrain::backend {

absl::StatusOr<int> ParseDevice(const std::string& device) {
  if (device == "cpu" || device == "cuda") return -1;
  int index = -1;
  if (!absl::StartsWith(device, "cuda:") ||
      !absl::SimpleAtoi(device.substr(5), &index) || index < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--device: '", device, "' is not cpu, cuda or cuda:N"));
  }
  return index;
}

absl::StatusOr<int> ChooseCudaDevice(const std::string& device,
                                     const RankPlacement& p,
                                     int visible_devices) {
  if (device == "cpu") return -1;
  DTRAIN_ASSIGN_OR_RETURN(const int requested, ParseDevice(device));
  const std::string flag = absl::StrCat("--device=", device, ": ");
  const std::string visible = absl::StrCat(
      visible_devices,
      visible_devices == 1 ? " CUDA device is" : " CUDA devices are",
      " visible");
  if (visible_devices < 1) {
    return absl::FailedPreconditionError(
        absl::StrCat(flag, "no CUDA device is visible to rank ", p.rank,
                     " (no GPU, or CUDA_VISIBLE_DEVICES hides them all)"));
  }
  if (requested >= 0) {
    if (requested < visible_devices) return requested;
    return absl::InvalidArgumentError(
        absl::StrCat(flag, "cuda:", requested, " requested but ", visible));
  }
  // One GPU per process, bound by the launcher.
  if (visible_devices == 1) return 0;
  if (p.local_rank < visible_devices && p.local_world_size <= visible_devices) {
    return p.local_rank;
  }
  if (p.local_inferred) {
    const std::string would =
        p.local_rank >= visible_devices
            ? absl::StrCat("so it would use cuda:", p.local_rank)
            : absl::StrCat("so all ", p.world_size,
                           " ranks are taken to run on this node");
    return absl::InvalidArgumentError(absl::StrCat(
        flag, "rank ", p.rank, " of ", p.world_size,
        " was given no local rank (no --local_rank, no launcher variable), ",
        would, ", but ", visible,
        ": pass --local_rank and --local_world_size, or start the ranks with "
        "a launcher"));
  }
  if (p.local_rank >= visible_devices) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, "local rank ", p.local_rank, " needs cuda:", p.local_rank,
        " but ", visible, " (local world size ", p.local_world_size, ")"));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      flag, p.local_world_size, " ranks on this node (local world size) but ",
      visible, ": start at most ", visible_devices,
      " ranks per node, one per GPU"));
}

}  // namespace dtrain::backend
