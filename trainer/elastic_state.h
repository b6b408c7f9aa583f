// Where each member of a new elastic generation gets the state it starts
// from (docs/RELIABILITY.md, "Elastic training"): the checkpoint bytes of the
// generation's committed step. A member already at that step holds them
// (replicas are bit-identical, and each rank encoded its own). Joiners, and
// survivors a step behind, receive them from a member that holds them: one
// on their own network address (a process restarted beside its peers gets
// the state without touching the network), else the generation's rank 0.
// Each source sends over a backend of itself and its receivers alone, so the
// network carries the state once per rank that needs it, no other member
// waits, and the generation's own backend carries no broadcast (with Gloo,
// one slows its later ring allreduces; small_collectives.h).
//
//   absl::StatusOr<StateShare> share = ShareCommittedState(
//       generation, state_store, backend_config, timeout, &bytes);
//
// Collective over each source and its receivers: every member calls it once,
// after the generation was formed, with the same Generation; a member that
// neither sends nor receives returns at once. `store` must reach the same
// keys on every member and be used for nothing else (a prefix of its own per
// generation). Thread-safe: ranks may be threads of one process, each with
// its own `bytes`.
#ifndef DTRAIN_TRAINER_ELASTIC_STATE_H_
#define DTRAIN_TRAINER_ELASTIC_STATE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dist/backend/factory.h"
#include "dist/rendezvous/next_generation.h"
#include "dist/store/store.h"

namespace dtrain::trainer {

// For each member (new rank), the member it receives the state from, or -1
// when it holds the state: joiners, and members whose last committed step is
// behind the generation's, receive it from the lowest member at the step
// whose standby store has their address, else from rank 0.
std::vector<int> StateSources(const rendezvous::Generation& generation);

struct StateShare {
  enum class Role { kKept, kSent, kReceived };
  Role role = Role::kKept;
  // kReceived: the rank it came from. kSent: the ranks it went to.
  int source = -1;
  std::vector<int> receivers;
  // What moved and how long the transfer took, from creating the backend
  // (zero for kKept).
  int64_t bytes = 0;
  absl::Duration took = absl::ZeroDuration();
};

// On every member that holds the state: `*bytes` is this rank's own state at
// the committed step (empty when no step was ever committed), left as it is.
// On a receiver it is replaced by its source's. The transfer runs
// on a backend of kind `config` (Gloo where `config` is NCCL: the bytes are
// on the host), created in `store`, bounded by `timeout`. Errors name this
// rank and what failed; a failure reaches a source and its receivers alike.
absl::StatusOr<StateShare> ShareCommittedState(
    const rendezvous::Generation& generation,
    std::shared_ptr<store::Store> store, const backend::BackendConfig& config,
    absl::Duration timeout, std::string* bytes);

}  // namespace dtrain::trainer

#endif  // DTRAIN_TRAINER_ELASTIC_STATE_H_
