// DistributedDataParallel as a Joinable (join.h): PyTorch's _DDPJoinHook.
// See ddp.h for the contract.
#include <ATen/core/grad_mode.h>

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "dist/ddp/collectives.h"
#include "dist/ddp/ddp.h"
#include "dist/ddp/layer_order.h"
#include "dist/ddp/model_sync.h"
#include "dist/ddp/reducer.h"

namespace dtrain::ddp {

absl::Status DistributedDataParallel::Attach(Join& join, bool notifies) {
  if (join_ != nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(internal::ErrorPrefix(backend_.rank()),
                     "already in a Join; one at a time"));
  }
  if (layer_order_ == nullptr) {
    std::vector<ShadowableLayer*> layers;
    for (const auto& m : module_->modules(/*include_self=*/true)) {
      if (auto* layer = dynamic_cast<ShadowableLayer*>(m.get())) {
        layers.push_back(layer);
      }
    }
    layer_order_ = std::make_unique<internal::LayerOrder>(std::move(layers));
  }
  join_ = &join;
  notifies_ = notifies;
  round_ = join.last_round();
  round_at_forward_ = round_.index;
  layer_order_->Observe(true);
  // Collectives inside backward would interleave with the buckets in an
  // order only autograd knows: the buckets wait for the end of backward.
  if (layer_order_->AnyCommunicates()) reducer_->set_launch_in_backward(false);
  return absl::OkStatus();
}

void DistributedDataParallel::Detach() {
  if (join_ == nullptr) return;
  layer_order_->Observe(false);
  reducer_->set_launch_in_backward(true);
  reducer_->set_divisor(backend_.size());
  join_ = nullptr;
}

void DistributedDataParallel::OnRound(const JoinRound& round) {
  round_ = round;
  reducer_->set_divisor(join_->options().divide_by_initial_world_size
                            ? round.world_size
                            : round.active);
}

absl::Status DistributedDataParallel::NotifyJoin() {
  layer_order_->NextIteration();
  if (notifies_) {
    const bool backward = at::GradMode::is_enabled();
    DTRAIN_RETURN_IF_ERROR(
        join_->NotifyActive(backward, backward && gradient_sync_.load())
            .status());
  } else if (join_->last_round().index == round_at_forward_) {
    return absl::FailedPreconditionError(absl::StrCat(
        internal::ErrorPrefix(backend_.rank()),
        "in a Join whose first joinable is not DDP, call Join::NotifyActive "
        "before each PrepareForward"));
  }
  round_at_forward_ = join_->last_round().index;
  return absl::OkStatus();
}

absl::Status DistributedDataParallel::Shadow(const JoinRound& round) {
  DTRAIN_RETURN_IF_ERROR(reducer_->CheckReadyForForward());
  // What the active ranks' PrepareForward broadcasts, by the same rule.
  if (options_.broadcast_buffers && require_forward_param_sync_ &&
      model_sync_->has_buffers()) {
    const absl::Time start = absl::Now();
    absl::Status s = model_sync_->BroadcastBuffers(
        absl::StrCat("buffers before ", reducer_->StepName(), " (shadowed)"),
        round.authoritative_rank);
    reducer_->RecordBufferBroadcast(absl::Now() - start, s);
    DTRAIN_RETURN_IF_ERROR(s);
  }
  require_forward_param_sync_ = round.grad_sync;
  // The layers' own collectives: forwards in call order, then backwards in
  // reverse (autograd's order).
  layer_order_->NextIteration();
  const std::vector<internal::LayerOrder::Entry> order = layer_order_->Order();
  for (const internal::LayerOrder::Entry& e : order) {
    DTRAIN_RETURN_IF_ERROR(e.layer->ShadowForward());
  }
  if (round.backward) {
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      if (it->backward) DTRAIN_RETURN_IF_ERROR(it->layer->ShadowBackward());
    }
  }
  if (!round.grad_sync) return absl::OkStatus();
  return reducer_->ShadowSynchronize();
}

absl::Status DistributedDataParallel::Finish(const JoinSummary& summary) {
  // PyTorch's _sync_final_model: every rank ends with the last joiner's
  // model, whatever the joined ranks did meanwhile.
  const absl::Time start = absl::Now();
  absl::Status s = model_sync_->BroadcastModel(
      absl::StrCat("the final model (rank ", summary.final_rank,
                   " joined last)"),
      summary.final_rank, options_.broadcast_buffers);
  reducer_->RecordBufferBroadcast(absl::Now() - start, s);
  return s;
}

}  // namespace dtrain::ddp
