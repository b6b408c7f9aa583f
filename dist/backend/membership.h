// Membership: the process group a backend is created for, the one
// description every backend shares (what torch.distributed's rank,
// world_size, store and timeout are to init_process_group).
//
//   rendezvous::World world = ...;  // from InitWorld (rendezvous/init.h)
//   GlooBackendOptions gloo;        // only Gloo's own knobs
//   CreateGlooBackend(world.membership(absl::Minutes(5)), gloo);
//
// Contract:
// - Every rank of the group passes the same world_size and timeout, a store
//   that reaches the same keys (each rank may hold its own client of it), and
//   a rank of its own in [0, world_size).
// - The backend keeps a reference to the store for its lifetime and works in
//   a namespace of its own inside it, so several backends (and the rendezvous
//   that produced the store) may share one store.
// - `timeout` bounds creating the backend (connecting, waiting for the other
//   ranks) and every collective it runs.
// - Check() is the one check of these fields: every backend's Create calls it
//   first, so a bad membership fails alike whichever backend is chosen.
//
// rendezvous::World::membership() hands out the one the rendezvous found.
// Inner backends (hierarchical_backend.h: shared memory on each host, Gloo
// among the hosts' leaders) are created with memberships of their own.
#ifndef DTRAIN_DIST_BACKEND_MEMBERSHIP_H_
#define DTRAIN_DIST_BACKEND_MEMBERSHIP_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "dist/store/store.h"

namespace dtrain::backend {

struct Membership {
  int rank = 0;
  int world_size = 1;
  // Where the ranks meet; the backend uses its own namespace inside it.
  std::shared_ptr<store::Store> store;
  // Bounds creating the backend and every collective.
  absl::Duration timeout = absl::Minutes(30);

  // kInvalidArgument, prefixed with `who` ("[rank 3] gloo"), for no store or a
  // rank outside [0, world_size).
  absl::Status Check(absl::string_view who) const;
};

}  // namespace dtrain::backend

#endif  // DTRAIN_DIST_BACKEND_MEMBERSHIP_H_
