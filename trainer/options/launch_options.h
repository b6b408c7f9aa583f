// The launch section of train's options: how this process finds the others
// (--dist_url and the explicit rank layout), which backend it talks through,
// its device, the timeout that bounds the rendezvous and every collective,
// and its compute threads. Consumed by train_main (the process group) and, for
// the device and the timeout, by the run. A plain value type.
#ifndef DTRAIN_TRAINER_OPTIONS_LAUNCH_OPTIONS_H_
#define DTRAIN_TRAINER_OPTIONS_LAUNCH_OPTIONS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/optional.h"

namespace dtrain::trainer {

struct LaunchOptions {
  // A name of dist/backend/backend_names.h.
  std::string dist_backend = "gloo";
  std::string dist_url = "env://";
  // gloo: shared memory between the ranks of a host (BackendConfig::shm).
  bool shm = true;
  // Explicit rank layout; unset: from the launcher's environment.
  absl::optional<int> world_size;
  absl::optional<int> rank;
  absl::optional<int> local_rank;
  // Ranks on this node; needed with local_rank when no launcher says.
  absl::optional<int> local_world_size;
  absl::optional<std::string> master_addr;
  absl::optional<int> master_port;
  // Bounds rendezvous and every collective.
  absl::Duration timeout = absl::Minutes(5);
  // Rank 0: the address its store server binds (empty: the master's
  // address; "*": every interface).
  std::string store_bind;
  // A collective waiting this long gets a warning naming the ranks that have
  // not reached it (BackendConfig::stall_warning); zero: half of the
  // timeout; infinite: off.
  absl::Duration stall_warning = absl::ZeroDuration();
  // "cpu", "cuda" (cuda:<local rank>) or "cuda:N".
  std::string device = "cpu";
  // LibTorch intra-op threads per process; several processes on few cores
  // oversubscribe otherwise.
  int intra_op_threads = 1;
  // Go on in the same processes when a rank dies or stalls
  // (trainer/elastic_run.h), down to min_ranks ranks.
  bool elastic = false;
  int min_ranks = 1;
  // With elastic: processes joining (grow) are admitted up to this many
  // ranks; 0: no bound.
  int max_ranks = 0;
  // With elastic: this process joins a running job (dist_url names its
  // first store) at its next step boundary, instead of starting one.
  bool join = false;
};

// kInvalidArgument naming the flag: an unknown backend or URL scheme, a
// backend that cannot reduce tensors on the device.
absl::Status ValidateLaunchOptions(const LaunchOptions& o);

}  // namespace dtrain::trainer

#endif  // DTRAIN_TRAINER_OPTIONS_LAUNCH_OPTIONS_H_
