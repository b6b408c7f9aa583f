// Averages DDP's per-step timeline (ddp::StepStats) over an epoch for the
// metrics JSON's "ddp_timeline": when each bucket's allreduce was launched,
// started running and finished relative to backward, and how much of the
// communication backward hid. Not thread-safe: the training thread's.
#ifndef DTRAIN_TRAINER_REPORT_DDP_TIMELINE_H_
#define DTRAIN_TRAINER_REPORT_DDP_TIMELINE_H_

#include "absl/types/optional.h"
#include "dist/ddp/ddp_types.h"
#include "trainer/report/run_metrics.h"

namespace dtrain::trainer {

class DdpTimelineAccumulator {
 public:
  // Adds one synchronised step. The run's first step (StepStats::step 1)
  // is left out: it includes lazy start-up (allocations, first connections).
  void Add(const ddp::StepStats& s);

  // The means since the last Reset; nullopt when no step was added.
  absl::optional<DdpTimeline> Mean() const;
  void Reset() { sum_ = DdpTimeline(); }

 private:
  DdpTimeline sum_;
};

}  // namespace dtrain::trainer

#endif  // DTRAIN_TRAINER_REPORT_DDP_TIMELINE_H_
