// The ranks' agreement on stopping at a step boundary: after each step every
// rank sends whether it was asked to stop (a signal), and once any rank was,
// all of them stop at the same step. One int allreduce per step, issued as
// soon as the step is done and collected after its reporting, which hides its
// round trip.
//
//   StopVote vote(sync, context.stop_requested);
//   ... step ...
//   vote.Issue();
//   ... report the step ...
//   DTRAIN_ASSIGN_OR_RETURN(bool stop, vote.Collect());
//
// Collective when `collective` (every rank calls Issue and Collect as often,
// in the same order as its other collectives); otherwise each rank answers
// for itself with no communication (ranks that do not average gradients run
// independently anyway). Without a request flag it never stops and never
// communicates. Thread-compatible; the flag may be set from any thread or a
// signal handler. Lifetimes: `sync`'s backend and the flag outlive the vote.
//
// Uneven inputs: the vote is a Joinable (dist/ddp/join.h). A rank that has
// joined votes (its own request) in every round whose iteration
// synchronises gradients, the one per optimizer step after which the active
// ranks vote, and remembers whether the vote said stop (ShadowedStop).
#ifndef DTRAIN_TRAINER_STOP_VOTE_H_
#define DTRAIN_TRAINER_STOP_VOTE_H_

#include <ATen/core/Tensor.h>

#include <atomic>
#include <memory>

#include "absl/status/statusor.h"
#include "dist/backend/backend.h"
#include "dist/backend/small_collectives.h"
#include "dist/ddp/join.h"

namespace dtrain::trainer {

class StopVote : public ddp::Joinable {
 public:
  // `regroup_requested` (optional, an elastic run's): a second question
  // asked with the same allreduce, whether any rank wants the ranks to
  // regroup at this step (joiners wait); see regroup().
  StopVote(const backend::SmallCollectives& sync,
           const std::atomic<bool>* stop_requested, bool collective = true,
           const std::atomic<bool>* regroup_requested = nullptr);
  StopVote(const StopVote&) = delete;
  StopVote& operator=(const StopVote&) = delete;

  // Sends this rank's answer; does not block.
  void Issue();
  // True when any rank was asked to stop, as of the last Issue (this rank's
  // own flag when not collective; false without a flag). The collective
  // answer is a host read, so it waits for the result (on CUDA a finished
  // vote also says the step's earlier collectives were good). Errors: the
  // backend's, within the timeout.
  absl::StatusOr<bool> Collect();
  // Whether the vote Collect last returned also said regroup (any rank's
  // regroup flag was set at its Issue). False while shadowing.
  bool regroup() const { return regroup_; }
  // Waits for a vote in flight, ignoring its outcome: before returning
  // another error, so that no collective is left behind unwaited.
  void Abandon();

  // Joinable: a joined rank's vote after each shadowed optimizer step.
  std::string JoinableName() const override { return "stop vote"; }
  absl::Status Shadow(const ddp::JoinRound& round) override;
  // Whether a vote taken while shadowing said stop; cleared when read.
  bool ShadowedStop();

 private:
  const backend::SmallCollectives sync_;
  const std::atomic<bool>* const stop_requested_;
  const bool collective_;
  const std::atomic<bool>* const regroup_requested_;
  bool regroup_ = false;
  // Carries the vote; undefined when there is no collective vote.
  at::Tensor flag_;
  std::shared_ptr<backend::Work> in_flight_;
  bool shadowed_stop_ = false;
};

}  // namespace dtrain::trainer

#endif  // DTRAIN_TRAINER_STOP_VOTE_H_
