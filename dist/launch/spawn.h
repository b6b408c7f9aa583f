// Starting one rank's process for the launcher (launcher.h): its
// environment (torchrun's variables, the job's store token, the elastic
// folder), fork and exec in a process group of its own that dies with the
// launcher; and what a group holds while it runs (the port reserved for
// master_port 0, the elastic folder). Private to dist/launch.
#ifndef DTRAIN_DIST_LAUNCH_SPAWN_H_
#define DTRAIN_DIST_LAUNCH_SPAWN_H_

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/posix_io.h"
#include "dist/launch/launcher.h"

namespace dtrain::launch::internal {

// What every rank of a Run() shares: the store token, and with --elastic the
// folder where the ranks leave the job's store addresses for replacements.
struct GroupEnv {
  std::string store_token;
  std::string elastic_dir;
};

// A random store token for a job on one node whose environment names none:
// the launcher starts every rank, so it can share a secret with them all, and
// no other user of the host can then use the job's store (on loopback,
// reachable by every local user). Empty when the user set one, or for
// several nodes, whose launchers cannot agree on a secret.
absl::StatusOr<std::string> JobStoreToken(const LaunchOptions& o);

// Starts rank `rank` (`local_rank` here) with the launcher's variables, and
// DTRAIN_ELASTIC_JOIN=1 when `joiner` (it joins the running job). Everything
// the child needs is prepared before fork(); it runs in its own process
// group and gets SIGKILL when the launcher dies. Call with SIGINT, SIGTERM
// and SIGCHLD handled by the launcher: the child resets them.
absl::StatusOr<pid_t> Spawn(const LaunchOptions& o, int rank, int local_rank,
                            int restart, const GroupEnv& group, bool joiner);

// A free port on `host` for master_port 0: bound with SO_REUSEADDR and not
// listening, which keeps the kernel from handing it to anyone else asking for
// a free port while still letting rank 0's store (SO_REUSEADDR too) bind and
// listen on it. The socket is not inherited by the ranks.
absl::StatusOr<base::UniqueFd> ReservePort(const std::string& host, int* port);

// The folder of an elastic group's store addresses (DTRAIN_ELASTIC_DIR):
// made under $TMPDIR, emptied and removed when the object is destroyed.
class ElasticDir {
 public:
  ElasticDir() = default;
  ElasticDir(const ElasticDir&) = delete;
  ElasticDir& operator=(const ElasticDir&) = delete;
  ~ElasticDir();
  // kInternal-like errno errors naming the pattern when it cannot be made.
  absl::Status Make();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace dtrain::launch::internal

#endif  // DTRAIN_DIST_LAUNCH_SPAWN_H_
