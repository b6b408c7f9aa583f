#include "trainer/stop_vote.h"

#include <ATen/Functions.h>

#include <utility>

#include "base/status_macros.h"

namespace dtrain::trainer {

StopVote::StopVote(const backend::SmallCollectives& sync,
                   const std::atomic<bool>* stop_requested, bool collective,
                   const std::atomic<bool>* regroup_requested)
    : sync_(sync),
      stop_requested_(stop_requested),
      collective_(collective),
      regroup_requested_(regroup_requested) {
  // One tensor for every vote: [stop, regroup] under a max.
  if (stop_requested_ != nullptr && collective_) {
    flag_ = at::zeros(
        {2}, at::TensorOptions().dtype(at::kInt).device(sync.device()));
  }
}

void StopVote::Issue() {
  if (!flag_.defined()) return;
  const bool regroup =
      regroup_requested_ != nullptr && regroup_requested_->load();
  flag_.copy_(at::tensor({stop_requested_->load() ? 1 : 0, regroup ? 1 : 0},
                         at::TensorOptions().dtype(at::kInt)));
  in_flight_ =
      sync_.backend().AllReduce(flag_, backend::ReduceOp::kMax, "stop vote");
}

absl::StatusOr<bool> StopVote::Collect() {
  regroup_ = false;
  if (stop_requested_ == nullptr) return false;
  if (!collective_) return stop_requested_->load();
  if (in_flight_ == nullptr) return false;
  std::shared_ptr<backend::Work> work = std::move(in_flight_);
  DTRAIN_RETURN_IF_ERROR(work->WaitForResult(sync_.timeout()));
  const at::Tensor vote = flag_.cpu();
  regroup_ = vote[1].item<int>() != 0;
  return vote[0].item<int>() != 0;
}

absl::Status StopVote::Shadow(const ddp::JoinRound& round) {
  if (!round.grad_sync) return absl::OkStatus();
  Issue();
  DTRAIN_ASSIGN_OR_RETURN(const bool stop, Collect());
  shadowed_stop_ = shadowed_stop_ || stop;
  regroup_ = false;
  return absl::OkStatus();
}

bool StopVote::ShadowedStop() {
  const bool stop = shadowed_stop_;
  shadowed_stop_ = false;
  return stop;
}

void StopVote::Abandon() {
  if (in_flight_ == nullptr) return;
  std::shared_ptr<backend::Work> work = std::move(in_flight_);
  work->Wait(sync_.timeout()).IgnoreError();
}

}  // namespace dtrain::trainer
