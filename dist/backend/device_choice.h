// Which CUDA device a rank uses, from a device string as PyTorch's
// init_process_group(device_id=...) and the tutorials' --device take it:
// "cpu", "cuda" (the rank's local rank) or "cuda:N". InitProcessGroup
// (process_group.h) chooses with it after the rendezvous, when the local rank
// is known; //trainer:train's --device is this string. Pure: touches no GPU.
#ifndef DTRAIN_DIST_BACKEND_DEVICE_CHOICE_H_
#define DTRAIN_DIST_BACKEND_DEVICE_CHOICE_H_

#include <string>

#include "absl/status/statusor.h"

namespace dtrain::backend {

// -1 for "cpu" and "cuda" (no index given), N for "cuda:N". kInvalidArgument
// ("--device: 'gpu' is not cpu, cuda or cuda:N") otherwise.
absl::StatusOr<int> ParseDevice(const std::string& device);

// Where a rank runs, as far as choosing its GPU goes (rendezvous::World's and
// LaunchEnv's fields).
struct RankPlacement {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  // No flag or launcher gave the local rank and size, so they are the global
  // ones (LaunchEnv::local_inferred): right on one node only.
  bool local_inferred = false;
};

// The CUDA device a rank uses, worked out before anything creates a CUDA
// context: -1 for "cpu", N for "cuda:N", and for "cuda" the local rank, except
// that a single visible device is every local rank's: a launcher that binds
// one GPU per process (Slurm's --gpus-per-task, CUDA_VISIBLE_DEVICES per
// rank) leaves each process cuda:0, and two ranks sharing one GPU are NCCL's
// to refuse. `visible_devices` is what the CUDA runtime counts (after
// CUDA_VISIBLE_DEVICES).
//
// Errors start with "--device=<device>: " and name the numbers they compare.
// kInvalidArgument for a malformed `device` (ParseDevice's), for cuda:N with
// N >= visible_devices, and for "cuda" when this rank's local rank, or the
// node's local world size, exceeds the visible devices (every rank of an
// overfull node fails alike, not only those past the end); with
// local_inferred the message says that no local rank was given and how to
// give one. kFailedPrecondition when no device is visible.
absl::StatusOr<int> ChooseCudaDevice(const std::string& device,
                                     const RankPlacement& placement,
                                     int visible_devices);

}  // namespace dtrain::backend

#endif  // DTRAIN_DIST_BACKEND_DEVICE_CHOICE_H_
