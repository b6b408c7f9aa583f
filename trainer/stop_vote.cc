#include "trainer/stop_vote.h"

#include <ATen/Functions.h>

#include <utility>

#include "base/status_macros.h"

namespace dtrain::trainer {

StopVote::StopVote(const backend::SmallCollectives& sync,
                   const std::atomic<bool>* stop_requested, bool collective)
    : sync_(sync), stop_requested_(stop_requested), collective_(collective) {
  // One tensor for every vote.
  if (stop_requested_ != nullptr && collective_) {
    flag_ = at::zeros(
        {1}, at::TensorOptions().dtype(at::kInt).device(sync.device()));
  }
}

void StopVote::Issue() {
  if (!flag_.defined()) return;
  flag_.fill_(stop_requested_->load() ? 1 : 0);
  in_flight_ =
      sync_.backend().AllReduce(flag_, backend::ReduceOp::kMax, "stop vote");
}

absl::StatusOr<bool> StopVote::Collect() {
  if (stop_requested_ == nullptr) return false;
  if (!collective_) return stop_requested_->load();
  if (in_flight_ == nullptr) return false;
  std::shared_ptr<backend::Work> work = std::move(in_flight_);
  DTRAIN_RETURN_IF_ERROR(work->WaitForResult(sync_.timeout()));
  return flag_.item<int>() != 0;
}

absl::Status StopVote::Shadow(const ddp::JoinRound& round) {
  if (!round.grad_sync) return absl::OkStatus();
  Issue();
  DTRAIN_ASSIGN_OR_RETURN(const bool stop, Collect());
  shadowed_stop_ = shadowed_stop_ || stop;
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
