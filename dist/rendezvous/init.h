// One call from "how was I launched, and which init method" to a connected
// store and a completed rendezvous, as torch.distributed.init_process_group
// does before creating its backend:
//
//   InitOptions options;
//   options.url = "env://";
//   options.args = args;  // what the binary's flags gave, if anything
//   absl::StatusOr<World> world = InitWorld(options, ProcessEnv());
//   // world->rank, world->world_size, world->store, world->peers;
//   // world->membership(timeout) for a backend (backend/membership.h)
//
// For every init method, rank and world size (and local rank and size) come
// from the explicit arguments, the URL's query (?rank=R&world_size=N), or the
// launcher that started the process: torchrun-style variables, Open MPI's
// mpirun, MPICH/PMI or Slurm's srun (DiscoverLaunchEnv in launch_env.h).
// Where the store lives depends on the scheme:
//   tcp://host:port  rank 0 serves a TcpStore there; MASTER_* are ignored.
//   file:///path     a FileStore in that file; MASTER_* are ignored.
//   env://           a single process (world size 1) uses an in-memory store
//                    and opens no port; otherwise
//                    rank 0 serves a TcpStore at the master address: from
//                    args.master_addr, MASTER_ADDR, or under Slurm the first
//                    host of the step's node list; the port from
//                    args.master_port or MASTER_PORT, else 29500. Unlike
//                    PyTorch's env://, which reads only torchrun's variables,
//                    this works under each launcher above. With more than one
//                    rank the address must come from one of those sources:
//                    the default 127.0.0.1 is right on one node only, so
//                    guessing it could leave ranks on other nodes waiting out
//                    the timeout.
// For tcp:// and env://, rank 0 starts the TcpStore server in this process:
// it must outlive every other rank's use of the store, so rank 0 keeps `World`
// alive until the job ends.
//
// Thread-safe: ranks may be threads of one process (tests), each with its own
// args.
#ifndef DTRAIN_DIST_RENDEZVOUS_INIT_H_
#define DTRAIN_DIST_RENDEZVOUS_INIT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dist/backend/membership.h"
#include "dist/rendezvous/init_method.h"
#include "dist/rendezvous/launch_env.h"
#include "dist/rendezvous/rendezvous.h"
#include "dist/store/store.h"

namespace dtrain::rendezvous {

struct InitOptions {
  std::string url = "env://";
  ExplicitArgs args;
  // Bounds connecting to the store and the rendezvous; the store's default for
  // later blocking calls.
  absl::Duration timeout = absl::Seconds(300);
  // tcp:// and env://: the address rank 0's store server binds. Empty: the
  // master's own address (MASTER_ADDR or the tcp:// host; loopback for the
  // default 127.0.0.1), so that the store is not reachable through every
  // interface; "*": every interface.
  std::string bind_host;
};

// The namespace of World::store in the store the init method opened: a
// process that joins the job later (an elastic joiner) reads the job's keys
// under it.
inline constexpr char kJobStorePrefix[] = "job";

struct World {
  // What a backend is created for (backend/membership.h): this rank, the world
  // size and the store, with `timeout` bounding the backend's creation and
  // every collective.
  backend::Membership membership(absl::Duration timeout) const;

  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  InitMethod method;
  LaunchEnv launch;
  // The job's namespace in the store, for the backends; keeps the underlying
  // store (and on rank 0 the TCP server) alive.
  std::shared_ptr<store::Store> store;
  std::vector<PeerInfo> peers;
};

// Errors: kInvalidArgument for a bad URL or launch environment (quoting it) and
// for env:// with more than one rank and no master address (naming
// MASTER_ADDR), the store's errors (unreachable master: address and time; busy
// port), and the rendezvous errors (missing ranks, duplicate ranks,
// disagreeing world sizes). A busy port and a duplicate rank (two jobs at one
// address, likely) say how to move: --master_port or --master_port=0 for
// env://, another port in the tcp:// URL, another file for file://.
// Every message starts with "[rank R]" once R is known.
absl::StatusOr<World> InitWorld(const InitOptions& options, const EnvMap& env);

}  // namespace dtrain::rendezvous

#endif  // DTRAIN_DIST_RENDEZVOUS_INIT_H_
