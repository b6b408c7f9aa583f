// The communication hook of post-local SGD (PyTorch's post_localSGD_hook):
// gradients are averaged globally, as by the allreduce hook, for the first
// `start_step` synchronised steps; after that each rank steps on its own
// gradients and a PeriodicModelAverager (dist/ddp/model_averager.h), called
// after each optimizer step, averages the parameters every few steps. The
// communication per step drops from every gradient to nothing, and to one
// model's worth every `period` steps.
//
// Unlike PyTorch's default (post_local_gradient_allreduce=True, which
// averages within each node's subgroup), no gradient is averaged after the
// start: PyTorch's post_local_gradient_allreduce=False. The backends have
// no subgroups yet.
//
// State: the synchronised steps so far, in State() for checkpoints. Thread
// safety as every hook (comm_hook.h).
#ifndef DTRAIN_DIST_DDP_HOOKS_LOCAL_SGD_HOOK_H_
#define DTRAIN_DIST_DDP_HOOKS_LOCAL_SGD_HOOK_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dist/ddp/comm_hook.h"

namespace dtrain::ddp::hooks {

class LocalSgdHook : public CommHook {
 public:
  // `start_step` >= 0: synchronised steps with global averaging first.
  explicit LocalSgdHook(int64_t start_step) : start_step_(start_step) {}

  std::string name() const override { return "local_sgd"; }
  absl::Status Setup(const std::vector<GradBucket>& buckets,
                     backend::Backend& backend) override;
  // Nothing once local SGD has started (the averager's traffic is apart).
  int64_t CommunicatedBytes(const GradBucket& bucket) const override;
  std::unique_ptr<BucketWork> Launch(GradBucket& bucket,
                                     BucketComm& comm) override;
  std::vector<std::pair<std::string, at::Tensor>> State() const override;
  absl::Status LoadState(
      const std::vector<std::pair<std::string, at::Tensor>>& state) override;

  // Synchronised steps so far (PyTorch's state.iter).
  int64_t steps() const { return steps_; }

 private:
  int64_t start_step_;
  int64_t steps_ = 0;
};

}  // namespace dtrain::ddp::hooks

#endif  // DTRAIN_DIST_DDP_HOOKS_LOCAL_SGD_HOOK_H_
