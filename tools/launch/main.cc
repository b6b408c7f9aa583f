// launch: torchrun for any program. See launcher.h for what it does.
//
//   launch --nproc_per_node=2 -- ./train --epochs=1
//   launch --nnodes=2 --node_rank=0 --master_addr=10.0.0.1 --nproc_per_node=4
//   -- ./train
//   launch --elastic --nnodes=1:2 --node_rank=1 --master_addr=10.0.0.1
//   --nproc_per_node=4 -- ./train --elastic     (a second node joins)
//
// Flags not given take torchrun's PET_* variables, and in a Kubernetes pod
// an operator's WORLD_SIZE, RANK and MASTER_* (dist/launch/node_env.h).

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "base/duration_flag.h"
#include "base/given_flags.h"
#include "base/machine_limits.h"
#include "base/open_file_limit.h"
#include "dist/launch/launcher.h"
#include "dist/launch/nnodes_flag.h"
#include "dist/launch/node_env.h"
#include "dist/rendezvous/launch_env.h"

ABSL_FLAG(int, nproc_per_node, 1, "Ranks to start on this node.");
ABSL_FLAG(dtrain::launch::NnodesFlag, nnodes, dtrain::launch::NnodesFlag(),
          "Number of nodes, each running its own launcher; with --elastic, "
          "MIN:MAX as torchrun: the job starts with MIN nodes, and the "
          "launchers of nodes MIN..MAX-1 join it while it runs.");
ABSL_FLAG(int, node_rank, 0, "This node's index in [0, nnodes) (the MAX).");
ABSL_FLAG(std::string, master_addr, "127.0.0.1",
          "Address of the node that runs rank 0.");
ABSL_FLAG(int, master_port, 29500,
          "Port of the rendezvous store on the master; 0: a free port the "
          "launcher picks (one node only), for jobs side by side.");
ABSL_FLAG(int, max_restarts, 0,
          "Restart the group this many times after a rank fails; with "
          "--elastic, start this many replacements in all, each joining the "
          "running job in a failed rank's place.");
ABSL_FLAG(bool, elastic, false,
          "A rank that fails does not stop the others (for programs that go "
          "on without it, such as train --elastic); the launcher succeeds "
          "when every rank left exits 0.");
ABSL_FLAG(dtrain::base::DurationFlag, failure_grace,
          dtrain::base::DurationFlag(absl::Seconds(5)),
          "After a rank fails: how long the others get to exit after SIGTERM "
          "before SIGKILL (a stopped rank is killed at once). Seconds (5) or "
          "with a unit (5s).");
ABSL_FLAG(dtrain::base::DurationFlag, stop_timeout,
          dtrain::base::DurationFlag(absl::Seconds(30)),
          "After SIGINT/SIGTERM to the launcher, forwarded to the ranks: how "
          "long they get to exit (checkpointing) before SIGKILL.");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "launch [flags] -- PROGRAM [ARGS...]: runs PROGRAM once per local rank "
      "with RANK, "
      "LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT "
      "set.");
  dtrain::base::RecordGivenFlags(argc, argv);
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  dtrain::base::RaiseOpenFileLimitOrWarn("launch");
  dtrain::launch::LaunchOptions o;
  o.nproc_per_node = absl::GetFlag(FLAGS_nproc_per_node);
  o.nnodes = absl::GetFlag(FLAGS_nnodes).min;
  o.max_nnodes = absl::GetFlag(FLAGS_nnodes).max;
  o.node_rank = absl::GetFlag(FLAGS_node_rank);
  o.master_addr = absl::GetFlag(FLAGS_master_addr);
  o.master_port = absl::GetFlag(FLAGS_master_port);
  o.max_restarts = absl::GetFlag(FLAGS_max_restarts);
  o.elastic = absl::GetFlag(FLAGS_elastic);
  o.failure_grace = absl::GetFlag(FLAGS_failure_grace).value;
  o.stop_timeout = absl::GetFlag(FLAGS_stop_timeout).value;
  const dtrain::rendezvous::EnvMap env = dtrain::rendezvous::ProcessEnv();
  dtrain::launch::GivenSettings given;
  given.nproc_per_node = dtrain::base::FlagGiven("nproc_per_node");
  given.nnodes = dtrain::base::FlagGiven("nnodes");
  given.node_rank = dtrain::base::FlagGiven("node_rank");
  given.master_addr = dtrain::base::FlagGiven("master_addr");
  given.master_port = dtrain::base::FlagGiven("master_port");
  given.max_restarts = dtrain::base::FlagGiven("max_restarts");
  absl::StatusOr<std::string> from_env = dtrain::launch::ApplyNodeEnv(
      env, given,
      {dtrain::launch::VisibleNvidiaGpus(env), dtrain::base::UsableCores()},
      &o);
  if (!from_env.ok()) {
    std::fprintf(stderr, "launch: %s\n",
                 std::string(from_env.status().message()).c_str());
    return 2;
  }
  if (!from_env->empty())
    std::cerr << "[launch] from the environment: " << *from_env << "\n";
  for (size_t i = 1; i < positional.size(); ++i)
    o.command.emplace_back(positional[i]);
  absl::StatusOr<dtrain::launch::LaunchResult> result =
      dtrain::launch::Run(o, std::cerr);
  if (!result.ok()) {
    std::fprintf(stderr, "launch: %s\n",
                 std::string(result.status().message()).c_str());
    return 2;
  }
  return result->exit_code;
}
