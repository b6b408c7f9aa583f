#include "dist/ddp/hooks/local_sgd_hook.h"

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "dist/ddp/hooks/allreduce_hook.h"

namespace dtrain::ddp::hooks {
namespace {

// A bucket whose local gradients are its result.
class LocalWork : public BucketWork {
 public:
  absl::StatusOr<Progress> Continue() override { return Progress::kDone; }
};

constexpr char kStepsKey[] = "local_sgd.steps";

}  // namespace

absl::Status LocalSgdHook::Setup(const std::vector<GradBucket>& buckets,
                                 backend::Backend& backend) {
  (void)buckets;
  (void)backend;
  if (start_step_ < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "local SGD's start step must be 0 or more, not ", start_step_));
  }
  return absl::OkStatus();
}

int64_t LocalSgdHook::CommunicatedBytes(const GradBucket& bucket) const {
  (void)bucket;
  return 0;
}

std::unique_ptr<BucketWork> LocalSgdHook::Launch(GradBucket& bucket,
                                                 BucketComm& comm) {
  // PyTorch counts a step when its last bucket goes out.
  const bool global = steps_ < start_step_;
  if (bucket.is_last()) ++steps_;
  if (!global) return std::make_unique<LocalWork>();
  return std::make_unique<WaitWork>(
      comm,
      comm.AllReduce(bucket.buffer, backend::ReduceOp::kAverage, "allreduce"),
      "allreduce");
}

std::vector<std::pair<std::string, at::Tensor>> LocalSgdHook::State() const {
  return {{kStepsKey, at::scalar_tensor(steps_, at::kLong)}};
}

absl::Status LocalSgdHook::LoadState(
    const std::vector<std::pair<std::string, at::Tensor>>& state) {
  if (state.size() != 1 || state[0].first != kStepsKey ||
      state[0].second.numel() != 1 ||
      state[0].second.scalar_type() != at::kLong) {
    return absl::InvalidArgumentError(
        absl::StrCat("local SGD's state is one int64 \"", kStepsKey,
                     "\"; the checkpoint holds something else"));
  }
  const int64_t steps = state[0].second.item<int64_t>();
  if (steps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("local SGD's step count cannot be ", steps));
  }
  steps_ = steps;
  return absl::OkStatus();
}

}  // namespace dtrain::ddp::hooks
