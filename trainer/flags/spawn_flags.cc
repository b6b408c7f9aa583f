// The flags that spawn local ranks, as torch.multiprocessing.spawn and
// torchrun do; read by the spawning process only.
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "base/duration_flag.h"
#include "dist/launch/nnodes_flag.h"
#include "trainer/flags/train_flags.h"

ABSL_FLAG(int, nproc_per_node, 0,
          "Spawn this many local ranks (0: this process is one rank).");
ABSL_FLAG(dtrain::launch::NnodesFlag, nnodes, dtrain::launch::NnodesFlag(),
          "With --nproc_per_node: number of nodes; with --elastic, MIN:MAX as "
          "torchrun (the job starts with MIN, nodes MIN..MAX-1 join it).");
ABSL_FLAG(int, node_rank, 0, "With --nproc_per_node: this node's index.");
ABSL_FLAG(int, max_restarts, 0,
          "With --nproc_per_node: restart the group this many times after a "
          "failure (it resumes from --checkpoint_dir); with --elastic, start "
          "this many replacements in all, each joining the running job in a "
          "failed rank's place.");
ABSL_FLAG(dtrain::base::DurationFlag, failure_grace,
          dtrain::base::DurationFlag(absl::Seconds(5)),
          "With --nproc_per_node: after a rank fails, how long the others get "
          "to exit after SIGTERM before SIGKILL.");

namespace dtrain::trainer {

SpawnFlags ReadSpawnFlags() {
  SpawnFlags s;
  s.nproc_per_node = absl::GetFlag(FLAGS_nproc_per_node);
  s.nnodes = absl::GetFlag(FLAGS_nnodes).min;
  s.max_nnodes = absl::GetFlag(FLAGS_nnodes).max;
  s.node_rank = absl::GetFlag(FLAGS_node_rank);
  s.max_restarts = absl::GetFlag(FLAGS_max_restarts);
  s.failure_grace = absl::GetFlag(FLAGS_failure_grace).value;
  return s;
}

const std::vector<std::string>& SpawnFlagNames() {
  static const auto* const kNames = new std::vector<std::string>{
      "nproc_per_node", "nnodes",       "node_rank",    "master_addr",
      "master_port",    "max_restarts", "failure_grace"};
  return *kNames;
}

}  // namespace dtrain::trainer
