// The launcher: starts a program once per local rank with torchrun's
// environment variables, watches the group, and ends it as a whole. For any
// program, not only the trainer:
//
//   launch --nproc_per_node=4 -- bazel-bin/trainer/train --epochs=1
//
// Each rank gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT, OMP_NUM_THREADS=1 and OPENBLAS_NUM_THREADS=1 (unless already
// set) and DTRAIN_RESTART_COUNT. Ranks run in their own process groups and die
// with the launcher (PR_SET_PDEATHSIG), so none is left behind. On one node,
// when the environment sets neither DTRAIN_STORE_TOKEN nor
// DTRAIN_STORE_TOKEN_FILE, the ranks also get a random DTRAIN_STORE_TOKEN, new
// for each Run(), so that other users of the host cannot use the job's store
// (docs/RELIABILITY.md).
//
// master_port 0 (one node only, as torchrun's --standalone): the launcher
// picks a free port on the master address and gives it to the ranks as
// MASTER_PORT, so that jobs can run side by side. It keeps the port bound
// (SO_REUSEADDR, not listening) until Run() returns, so that no other
// program asking the kernel for a free port gets it, also between restarts;
// rank 0's store binds it with SO_REUSEADDR (the project's TcpStore and
// PyTorch's c10d TCPStore do; a server without it would find it busy).
//
// When a rank fails (non-zero exit or a signal) the launcher stops the others
// (SIGTERM, then SIGKILL after `failure_grace`; at once for a rank that is
// stopped, by SIGSTOP say, which cannot act on SIGTERM) and reports which rank
// failed and how, once. A rank still stopped `failure_grace` after another
// exited 0 has failed too: nothing else would end it. With max_restarts > 0 it
// then starts the whole group again (a trainer resumes from its latest
// checkpoint), or with `elastic` replaces the failed rank alone (below).
// SIGINT and SIGTERM sent to the launcher are forwarded to every
// rank; the launcher then waits `stop_timeout` for them to exit.
//
// Run() installs SIGINT/SIGTERM/SIGCHLD handling for its duration; call it from
// one thread at a time.
#ifndef DTRAIN_DIST_LAUNCH_LAUNCHER_H_
#define DTRAIN_DIST_LAUNCH_LAUNCHER_H_

#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace dtrain::launch {

struct LaunchOptions {
  int nproc_per_node = 1;
  // The nodes the job starts with, each running a launcher.
  int nnodes = 1;
  // With elastic (torchrun's --nnodes=MIN:MAX, MIN being nnodes): the nodes
  // it may grow to. A launcher of node_rank in [nnodes, max_nnodes) starts
  // its ranks as joiners of the running job (found through master_addr and
  // master_port, the job's first store). Every rank gets
  // DTRAIN_ELASTIC_MIN_RANKS and DTRAIN_ELASTIC_MAX_RANKS (nproc_per_node
  // times each bound), which train --elastic takes as its --min_ranks and
  // --max_ranks unless given. 0 (or nnodes): no range.
  int max_nnodes = 0;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  // 0: a free port, chosen by the launcher (nnodes 1 only; see above).
  int master_port = 29500;
  int max_restarts = 0;
  // A rank that fails does not end the group: the others go on (a program
  // that survives a peer's death, such as train --elastic). The group
  // succeeds when every rank that did not fail exits 0, and at least one
  // does. With max_restarts, a failed rank is replaced by a new process in
  // its place (the same LOCAL_RANK), up to max_restarts times in all, while
  // no rank has finished: it gets DTRAIN_ELASTIC_JOIN=1 and joins the running
  // job (train --elastic does) rather than starting one. Every rank gets
  // DTRAIN_ELASTIC_DIR, a folder of the launcher's (removed at the end) where
  // the job leaves its store addresses for replacements to find it, its
  // rank 0 dead or not.
  bool elastic = false;
  // After a rank failed: how long the others get to exit after SIGTERM before
  // SIGKILL. Short: they cannot finish the job without the failed rank. Also
  // how long a rank may stay stopped after another one finished.
  absl::Duration failure_grace = absl::Seconds(5);
  // After SIGINT/SIGTERM to the launcher, forwarded to the ranks: how long they
  // get to exit (a trainer writes a checkpoint first) before SIGKILL.
  absl::Duration stop_timeout = absl::Seconds(30);
  // The program and its arguments.
  std::vector<std::string> command;
};

struct LaunchResult {
  // 0 when every rank exited 0; 1 when a rank failed; 128 + signal when the
  // launcher was stopped by SIGINT or SIGTERM.
  int exit_code = 0;
  // What happened, for people: "rank 2 (local rank 2, pid 4242) was killed by
  // signal 9 (Killed)".
  std::string summary;
  int restarts = 0;
  // The MASTER_PORT the ranks got: the one picked for master_port 0.
  int master_port = 0;
};

// Checks the options: kInvalidArgument naming the bad one, also for
// nproc_per_node above base::LocalProcessLimit() (16x the cores, within
// pid_max and RLIMIT_NPROC) and a world size above base::kMaxWorldSize.
absl::Status ValidateLaunchOptions(const LaunchOptions& options);

// Runs the group to the end. Progress lines ("[launch] ...") go to `log`, a
// rank's failure once, when it happens. Errors only for what prevents
// launching at all (bad options, no free port, fork failure); rank failures
// are in the result.
absl::StatusOr<LaunchResult> Run(const LaunchOptions& options,
                                 std::ostream& log);

}  // namespace dtrain::launch

#endif  // DTRAIN_DIST_LAUNCH_LAUNCHER_H_
