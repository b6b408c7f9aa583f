// The reducer's per-step statistics (StepStats): when each bucket was
// launched, started and finished, relative to the step's first gradient
// hook. See reducer.h.
#include <vector>

#include "absl/types/optional.h"
#include "dist/ddp/reducer.h"

namespace dtrain::ddp::internal {

void Reducer::FillStepStats(StepStats* out) const {
  StepStats& stats = *out;
  stats.step = steps_;
  stats.num_buckets = static_cast<int>(buckets_.size());
  stats.first_hook = first_hook_;
  for (const Bucket& b : buckets_) {
    stats.buckets_launched_in_backward += b.launched_in_backward ? 1 : 0;
    stats.bucket_launch_offsets.push_back(b.launched_at - first_hook_);
    const std::vector<BucketComm::Launched>& launched = b.comm->launched();
    if (launched.empty()) continue;
    // From the start of the bucket's first collective to the end of its last.
    const absl::optional<backend::WorkTimes> first =
        launched.front().work->times();
    const absl::optional<backend::WorkTimes> last =
        launched.back().work->times();
    if (first && last) {
      stats.bucket_start_offsets.push_back(first->started - first_hook_);
      stats.bucket_finish_offsets.push_back(last->finished - first_hook_);
    }
  }
  // All or nothing: offsets line up with buckets.
  if (stats.bucket_start_offsets.size() != buckets_.size()) {
    stats.bucket_start_offsets.clear();
    stats.bucket_finish_offsets.clear();
  }
  stats.backward_until_last_gradient = last_hook_ - first_hook_;
  for (const BucketInfo& info : bucket_info_)
    stats.bucket_bytes.push_back(info.bytes);
  stats.backward_until_last_launch =
      buckets_.empty() ? absl::ZeroDuration() : last_launch_ - first_hook_;
}

}  // namespace dtrain::ddp::internal
