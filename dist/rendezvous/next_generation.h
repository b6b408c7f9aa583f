// How the survivors of an elastic job agree on who goes on after a rank died
// or stalled (docs/RELIABILITY.md, "Elastic training"): the next generation.
// Nobody knows in advance how many survived, so each previous member is
// waited for until it is accounted for: registered in the new generation, or
// found gone (its process is dead: its standby store refuses connections),
// or found stopped for longer than `stopped_grace` (its standby accepts but
// does not answer). The first rank that sees every member accounted for
// proposes the list of those registered, and a compare-and-set in the store
// makes that proposal the one every rank reads. New rank 0 is the lowest
// previous rank at the highest committed step (the state every rank starts
// from is its); the others follow in the old order. A rank left out (stopped
// too long, registering after the list was closed) is refused, naming the
// generation.
//
// Joiners (grow): a process that joins a running job queues itself
// (JoinNextGeneration); the proposer of a generation appends the queued
// joiners after the previous members, up to max_ranks, and every member then
// admits them (AdmitJoiners), which tells each its generation. The members
// learn of a queued joiner with PendingJoiners and form a generation for it
// at a step boundary, all alive.
//
// Every survivor calls FormNextGeneration once per generation, with the same
// generation number, previous world size and minimum. Thread-safe as the
// store is: ranks may be threads of one process.
#ifndef DTRAIN_DIST_RENDEZVOUS_NEXT_GENERATION_H_
#define DTRAIN_DIST_RENDEZVOUS_NEXT_GENERATION_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dist/store/store.h"

namespace dtrain::rendezvous {

// What a previous member's liveness probe found.
enum class PeerState {
  kAlive,    // It answers: it will register, however busy it is now.
  kGone,     // Its process is dead.
  kStopped,  // Its process exists but does not answer (SIGSTOP, a hang).
};

struct GenerationMember {
  // Its rank in the previous generation; for a joiner, minus its ticket in
  // the join queue (-1, -2, ...).
  int previous_rank = 0;
  // The last step this rank's optimizer applied.
  int64_t committed_step = 0;
  int64_t pid = 0;
  // Its standby store ("host:port"), which others probe; "-" when none.
  std::string standby = "-";
  std::string host;

  bool joiner() const { return previous_rank < 0; }

  std::string Encode() const;
  static absl::StatusOr<GenerationMember> Decode(absl::string_view text);
};

struct NextGenerationOptions {
  // The generation being formed: 1 after the job's first, and so on.
  int generation = 1;
  int previous_world_size = 1;
  // This rank as it registers (previous_rank is its rank until now).
  GenerationMember self;
  // Fewer members than this fail the generation on every rank.
  int min_ranks = 1;
  // How long a stopped member is waited for before it is left out.
  absl::Duration stopped_grace = absl::Seconds(5);
  // The bound on the whole agreement.
  absl::Duration timeout = absl::Seconds(60);
  // Liveness of previous member `rank`, asked while it has not registered.
  // Called from the calling thread only.
  std::function<PeerState(int rank)> probe;
  // More members than this are not formed: queued joiners beyond it wait
  // for a later generation. 0: no bound.
  int max_ranks = 0;
  // Whether to admit the queued joiners (after the previous members, in
  // queue order).
  bool admit_joiners = false;
};

struct Generation {
  int generation = 0;
  // This rank in the new generation, and its size.
  int rank = 0;
  int world_size = 0;
  // Every member, indexed by new rank: members[0] is at committed_step.
  std::vector<GenerationMember> members;
  // The highest committed step among the members: where the run goes on.
  int64_t committed_step = 0;
};

// kFailedPrecondition when this rank was left out of the generation (naming
// it and the members), or when fewer than min_ranks are left (on every rank,
// naming who is gone); kDeadlineExceeded naming the members not accounted
// for; kInvalidArgument for bad options; the store's errors.
absl::StatusOr<Generation> FormNextGeneration(
    store::Store& store, const NextGenerationOptions& options);

// The newest generation formed through `store` (FormNextGeneration records it
// on every member), 0 when none was: how a rank that was stopped finds that
// the others went on without it, on a store it did not use.
absl::StatusOr<int> LatestGeneration(store::Store& store);

// After FormNextGeneration, on every member: tells the joiners it admitted
// which generation they are in. Idempotent.
absl::Status AdmitJoiners(store::Store& store, const Generation& generation);

// How many joiners are queued and not admitted yet (one store read, for the
// members to look at between steps).
absl::StatusOr<int64_t> QueuedJoiners(store::Store& store);

// The joiner's side: queues `self` (its pid, host and standby; previous_rank
// and committed_step are set here) and waits until a generation admits it,
// at most `timeout`. kDeadlineExceeded when none did (the job is at
// max_ranks, or not between steps for that long); the store's errors.
absl::StatusOr<Generation> JoinNextGeneration(store::Store& store,
                                              GenerationMember self,
                                              absl::Duration timeout);

}  // namespace dtrain::rendezvous

#endif  // DTRAIN_DIST_RENDEZVOUS_NEXT_GENERATION_H_
