// The launch section's flags (trainer/options/launch_options.h): how this
// process finds the others and what it talks through.
#include <string>

#include "absl/flags/flag.h"
#include "base/duration_flag.h"
#include "trainer/flags/train_flags.h"

ABSL_FLAG(std::string, dist_backend, "gloo",
          "gloo (CPU), nccl (CUDA) or shm (CPU, every rank on one host, "
          "through shared memory).");
ABSL_FLAG(bool, shm, true,
          "gloo: ranks that share a host reduce through shared memory, and "
          "one leader per host talks Gloo over TCP to the other hosts. "
          "--shm=false: Gloo over TCP between every pair of ranks.");
ABSL_FLAG(std::string, dist_url, "env://",
          "tcp://HOST:PORT, file:///PATH or env://.");
ABSL_FLAG(int, world_size, -1, "Number of processes (default: launcher's).");
ABSL_FLAG(int, rank, -1, "This process's rank (default: launcher's).");
ABSL_FLAG(int, local_rank, -1,
          "This process's rank on its node (default: launcher's).");
ABSL_FLAG(int, local_world_size, -1,
          "Ranks on this node, with --local_rank (default: launcher's, or "
          "LOCAL_WORLD_SIZE).");
ABSL_FLAG(std::string, master_addr, "",
          "Address of rank 0's node (default: launcher's, or 127.0.0.1 when "
          "spawning).");
ABSL_FLAG(int, master_port, 0,
          "Port of the rendezvous store (default: launcher's, or 29500; 0 with "
          "--nproc_per_node on one node: a free port, as torchrun's "
          "--standalone).");
ABSL_FLAG(dtrain::base::DurationFlag, timeout,
          dtrain::base::DurationFlag(absl::Minutes(5)),
          "Bounds the rendezvous and every collective: seconds (30) or with a "
          "unit (30s, 5m).");
ABSL_FLAG(std::string, store_bind, "",
          "Rank 0: the address its store server binds (default: the master's "
          "address, so other interfaces cannot reach it; *: every "
          "interface). The store's token comes from DTRAIN_STORE_TOKEN or "
          "DTRAIN_STORE_TOKEN_FILE, never a flag.");
ABSL_FLAG(dtrain::base::DurationFlag, stall_warning,
          dtrain::base::DurationFlag(absl::ZeroDuration()),
          "A collective waiting this long gets a warning naming the ranks that "
          "have not reached it and what they last did; 0: half of --timeout, "
          "inf: off.");
ABSL_FLAG(std::string, device, "cpu", "cpu, cuda (cuda:LOCAL_RANK) or cuda:N.");
ABSL_FLAG(int, intra_op_threads, 1, "LibTorch threads per process.");
ABSL_FLAG(bool, elastic, false,
          "When a rank dies or stalls past --timeout, the others go on in the "
          "same processes from the last step every one of them committed "
          "(docs/RELIABILITY.md); down to --min_ranks.");
ABSL_FLAG(int, min_ranks, 1,
          "With --elastic: fewer ranks than this end the run with the "
          "reason.");
ABSL_FLAG(int, max_ranks, 0,
          "With --elastic: joining processes (--join) are admitted up to this "
          "many ranks; 0: no bound.");
ABSL_FLAG(bool, join, false,
          "With --elastic: join the running job whose first store --dist_url "
          "names (tcp://HOST:PORT) at its next step boundary; the state comes "
          "from its rank 0 over the backend. No --rank or --world_size.");

namespace dtrain::trainer {

absl::Status ReadLaunchFlags(LaunchOptions* o) {
  o->dist_backend = absl::GetFlag(FLAGS_dist_backend);
  o->dist_url = absl::GetFlag(FLAGS_dist_url);
  o->shm = absl::GetFlag(FLAGS_shm);
  if (Specified("world_size")) o->world_size = absl::GetFlag(FLAGS_world_size);
  if (Specified("rank")) o->rank = absl::GetFlag(FLAGS_rank);
  if (Specified("local_rank")) o->local_rank = absl::GetFlag(FLAGS_local_rank);
  if (Specified("local_world_size"))
    o->local_world_size = absl::GetFlag(FLAGS_local_world_size);
  if (Specified("master_addr"))
    o->master_addr = absl::GetFlag(FLAGS_master_addr);
  if (Specified("master_port"))
    o->master_port = absl::GetFlag(FLAGS_master_port);
  o->timeout = absl::GetFlag(FLAGS_timeout).value;
  o->store_bind = absl::GetFlag(FLAGS_store_bind);
  o->stall_warning = absl::GetFlag(FLAGS_stall_warning).value;
  o->device = absl::GetFlag(FLAGS_device);
  o->intra_op_threads = absl::GetFlag(FLAGS_intra_op_threads);
  o->elastic = absl::GetFlag(FLAGS_elastic);
  o->min_ranks = absl::GetFlag(FLAGS_min_ranks);
  o->max_ranks = absl::GetFlag(FLAGS_max_ranks);
  o->join = absl::GetFlag(FLAGS_join);
  return absl::OkStatus();
}

}  // namespace dtrain::trainer
