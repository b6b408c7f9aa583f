// The default communication hook: each bucket averaged with one allreduce,
// as PyTorch's DDP does without a hook (allreduce_hook). Stateless.
#ifndef DTRAIN_DIST_DDP_HOOKS_ALLREDUCE_HOOK_H_
#define DTRAIN_DIST_DDP_HOOKS_ALLREDUCE_HOOK_H_

#include <memory>
#include <string>

#include "dist/ddp/comm_hook.h"

namespace dtrain::ddp::hooks {

class AllReduceHook : public CommHook {
 public:
  std::string name() const override { return "allreduce"; }
  std::unique_ptr<BucketWork> Launch(GradBucket& bucket,
                                     BucketComm& comm) override;
};

// A BucketWork that waits for one collective and is then done: what simple
// hooks return.
class WaitWork : public BucketWork {
 public:
  WaitWork(BucketComm& comm, std::shared_ptr<backend::Work> work,
           std::string stage)
      : comm_(comm), work_(std::move(work)), stage_(std::move(stage)) {}
  absl::StatusOr<Progress> Continue() override;

 private:
  BucketComm& comm_;
  std::shared_ptr<backend::Work> work_;
  std::string stage_;
};

}  // namespace dtrain::ddp::hooks

#endif  // DTRAIN_DIST_DDP_HOOKS_ALLREDUCE_HOOK_H_
