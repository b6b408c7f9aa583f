#include "trainer/report/ddp_timeline.h"

#include <algorithm>
#include <cstddef>

#include "absl/time/time.h"

namespace dtrain::trainer {

void DdpTimelineAccumulator::Add(const ddp::StepStats& s) {
  if (s.step <= 1) return;
  const size_t n = s.bucket_launch_offsets.size();
  const bool timed = n > 0 && s.bucket_start_offsets.size() == n &&
                     s.bucket_finish_offsets.size() == n;
  // A step that differs in shape from the ones before starts over (the
  // buckets of one DDP never change; a new DDP would).
  if (sum_.steps > 0 && (sum_.buckets.size() != n || sum_.timed != timed)) {
    Reset();
  }
  if (sum_.steps == 0) {
    sum_.timed = timed;
    sum_.buckets.assign(n, DdpTimeline::Bucket());
  }
  ++sum_.steps;
  const double backward = absl::ToDoubleSeconds(s.backward_until_last_gradient);
  sum_.backward_seconds += backward;
  sum_.hooks_seconds += absl::ToDoubleSeconds(s.hooks);
  sum_.synchronize_seconds += absl::ToDoubleSeconds(s.synchronize);
  for (size_t i = 0; i < n; ++i) {
    DdpTimeline::Bucket& b = sum_.buckets[i];
    if (i < s.bucket_bytes.size()) b.bytes = s.bucket_bytes[i];
    b.launch_seconds += absl::ToDoubleSeconds(s.bucket_launch_offsets[i]);
    if (!timed) continue;
    b.start_seconds += absl::ToDoubleSeconds(s.bucket_start_offsets[i]);
    b.finish_seconds += absl::ToDoubleSeconds(s.bucket_finish_offsets[i]);
  }
  if (timed) {
    const double first_start = absl::ToDoubleSeconds(s.bucket_start_offsets[0]);
    const double last_finish =
        absl::ToDoubleSeconds(s.bucket_finish_offsets[n - 1]);
    sum_.communication_seconds += std::max(0.0, last_finish - first_start);
    sum_.overlap_seconds +=
        std::max(0.0, std::min(backward, last_finish) - first_start);
  }
}

absl::optional<DdpTimeline> DdpTimelineAccumulator::Mean() const {
  if (sum_.steps == 0) return absl::nullopt;
  DdpTimeline m = sum_;
  const double k = static_cast<double>(sum_.steps);
  m.backward_seconds /= k;
  m.hooks_seconds /= k;
  m.synchronize_seconds /= k;
  m.communication_seconds /= k;
  m.overlap_seconds /= k;
  for (DdpTimeline::Bucket& b : m.buckets) {
    b.launch_seconds /= k;
    b.start_seconds /= k;
    b.finish_seconds /= k;
  }
  return m;
}

}  // namespace dtrain::trainer
