// Uneven inputs: ranks with different numbers of iterations train together
// without hanging, as PyTorch's torch.distributed.algorithms.Join. A rank
// that runs out of inputs joins; until every rank has, it shadows the active
// ranks' iterations, issuing the collectives they issue with nothing of its
// own in them (zero gradients, count-0 statistics). Then every rank takes
// the model of the last rank to join.
//
//   // ddp first: its PrepareForward notifies the Join every iteration.
//   DTRAIN_ASSIGN_OR_RETURN(std::unique_ptr<Join> join,
//                           Join::Create({ddp.get()}, backend, {}));
//   for (const auto& [x, y] : my_batches) {  // a different count per rank
//     DTRAIN_RETURN_IF_ERROR(ddp->PrepareForward());
//     loss(model->forward(x), y).backward();
//     DTRAIN_RETURN_IF_ERROR(ddp->SynchronizeGradients());
//     optimizer.step();
//   }
//   DTRAIN_ASSIGN_OR_RETURN(JoinSummary summary, join->JoinAndShadow());
//   // Every rank now has the last joiner's parameters and buffers.
//
// Semantics (PyTorch's): gradients are averaged over the initial world size,
// joined ranks contributing zeros (divide_by_initial_world_size), or over
// the ranks active in the iteration; buffers are broadcast from the highest
// active rank rather than rank 0, which may have joined; the final model is
// broadcast from the highest of the last ranks to join.
//
// Protocol: every iteration is one round, and every rank takes part in each
// round through one small allreduce: an int32 per rank, this rank's slot
// saying joined (0) or active, with or without backward and gradient sync,
// everyone else's slot 0. The sum tells every rank how many ranks are active,
// the highest active rank (the authoritative one) and what the active ranks'
// iteration does. PyTorch spends three allreduces on the same (the join
// notification, the backward-sync flag, the authoritative rank).
//
// Call order across ranks: in each round, an active rank notifies before the
// iteration's other collectives (DistributedDataParallel::PrepareForward
// does, when DDP is the first joinable; with another first joinable, call
// NotifyActive yourself), then runs its iteration. A joined rank, inside
// JoinAndShadow, notifies too and then runs every joinable's Shadow in the
// order given to Create; together they must issue exactly the collectives of
// an active rank's iteration after its notification, in the same order. Once
// a round finds no rank active, every rank runs every joinable's Finish, in
// order (collective: DDP's final broadcast). Active ranks must agree on
// whether their iteration runs backward and synchronises gradients (the same
// no_sync pattern); a round where they do not fails on every rank.
//
// Errors come back as absl::Status on every path, never a hang: a collective
// that fails or outlives the timeout (a dead or stalled rank) says which
// rank, which round and what was being shadowed: "[rank 0] join: round 7
// (rank 2 active, authoritative rank 2), shadowing ddp: [rank 0] ddp: step 7
// (shadowed), bucket 0 (...) allreduce failed after 2.0s: <backend
// message>". After an error the Join is broken and returns it from every
// call. A dead or stalled rank in the joinables' own collectives errs the
// same way; DDP's timeout and the backend's bound every wait.
//
// Thread safety: one training thread drives a Join and its joinables.
// Lifetimes: the joinables and the backend must outlive the Join; its
// destructor detaches the joinables (after which they act alone again).
#ifndef DTRAIN_DIST_DDP_JOIN_H_
#define DTRAIN_DIST_DDP_JOIN_H_

#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dist/backend/backend.h"
#include "dist/backend/small_collectives.h"

namespace dtrain::ddp {

class Join;

// What one round's notification told every rank.
struct JoinRound {
  // 1 for the Join's first round.
  int64_t index = 0;
  int world_size = 0;
  // Ranks that notified as active, and the highest of them (-1: none).
  int active = 0;
  int authoritative_rank = -1;
  // The active ranks' iteration runs backward (grad mode on), and
  // synchronises gradients (not under no_sync).
  bool backward = false;
  bool grad_sync = false;
};

// How a Join ended, as seen by one rank.
struct JoinSummary {
  // Rounds with an active rank, and how many of them this rank shadowed.
  int64_t rounds = 0;
  int64_t shadowed = 0;
  // This rank was active in the last round that had an active rank.
  bool is_last_joiner = false;
  // The highest last joiner (world_size - 1 when no round had an active
  // rank): the authoritative copy of the model, the same on every rank.
  int final_rank = 0;
};

struct JoinOptions {
  // Where the notification's tensor lives: the CPU for gloo and shm, the
  // rank's CUDA device for nccl.
  c10::Device device = c10::Device(c10::kCPU);
  // Bounds each wait for a notification.
  absl::Duration timeout = absl::InfiniteDuration();
  // PyTorch's divide_by_initial_world_size: true averages gradients over the
  // world size, joined ranks contributing zeros; false over the ranks active
  // in the iteration (DDP then scales each bucket by world size / active
  // before its communication hook: right for hooks that average, such as
  // allreduce, fp16, bf16 and PowerSGD; not for local SGD, which does not).
  bool divide_by_initial_world_size = true;
  // PyTorch's throw_on_early_termination: instead of shadowing, every rank
  // fails (kOutOfRange) in the first round after a rank ran out of inputs.
  bool throw_on_early_termination = false;
};

// A participant: something whose iterations issue collectives that a joined
// rank must shadow (PyTorch's Joinable with its JoinHook).
class Joinable {
 public:
  virtual ~Joinable() = default;

  // "ddp", "stop vote": names it in errors.
  virtual std::string JoinableName() const = 0;

  // Join::Create, on every rank. `notifies`: the joinable comes first and
  // notifies the Join each iteration (Join::NotifyActive). An error fails
  // Create. Detach: the Join's destructor.
  virtual absl::Status Attach(Join& join, bool notifies) {
    (void)join;
    (void)notifies;
    return absl::OkStatus();
  }
  virtual void Detach() {}

  // Every round, on every rank, active or joined, as soon as its
  // notification is complete (before Shadow).
  virtual void OnRound(const JoinRound& round) { (void)round; }

  // A joined rank, once per round that has an active rank (PyTorch's
  // main_hook): the collectives this joinable issues in an active rank's
  // iteration, after the notification.
  virtual absl::Status Shadow(const JoinRound& round) = 0;

  // Every rank once all have joined (PyTorch's post_hook).
  virtual absl::Status Finish(const JoinSummary& summary) {
    (void)summary;
    return absl::OkStatus();
  }
};

class Join {
 public:
  // Attaches `joinables` (at least one, not null, none attached to another
  // Join), whose Shadow and Finish run in this order; the first one
  // notifies. kInvalidArgument otherwise, or the first Attach's error. No
  // collective.
  static absl::StatusOr<std::unique_ptr<Join>> Create(
      std::vector<Joinable*> joinables, backend::Backend& backend,
      const JoinOptions& options = {});

  ~Join();
  Join(const Join&) = delete;
  Join& operator=(const Join&) = delete;

  // An active rank's notification, once per iteration before its other
  // collectives (the first joinable calls it). `backward`, `grad_sync`:
  // what this iteration does (see JoinRound). Collective.
  // kFailedPrecondition after JoinAndShadow, or when the active ranks
  // disagree on backward or grad_sync; kOutOfRange with
  // throw_on_early_termination once a rank has joined.
  absl::StatusOr<JoinRound> NotifyActive(bool backward, bool grad_sync);

  // This rank is out of inputs: shadows every round that has an active
  // rank, then runs every joinable's Finish. Collective; once.
  absl::StatusOr<JoinSummary> JoinAndShadow();

  // The last round this rank took part in (index 0 before the first).
  const JoinRound& last_round() const { return last_round_; }
  const JoinOptions& options() const { return options_; }
  backend::Backend& backend() const { return comm_.backend(); }

 private:
  Join(std::vector<Joinable*> joinables, backend::Backend& backend,
       const JoinOptions& options);

  // One round's notification with this rank's code (0: joined); tells every
  // joinable.
  absl::StatusOr<JoinRound> Round(int code);
  absl::Status Broken(absl::Status s);

  const std::vector<Joinable*> joinables_;
  const JoinOptions options_;
  const backend::SmallCollectives comm_;
  size_t attached_ = 0;
  JoinRound last_round_;
  // The last round's active ranks, for messages.
  std::vector<int> active_ranks_;
  // Rounds that had an active rank, and the authoritative rank of the last.
  int64_t active_rounds_ = 0;
  int last_authoritative_ = -1;
  bool joined_ = false;
  absl::Status broken_;
};

}  // namespace dtrain::ddp

#endif  // DTRAIN_DIST_DDP_JOIN_H_
