// One rank's trace of the steps a run was asked to trace (--trace_steps):
// what each step spent waiting for data, in forward, in backward, waiting for
// the averaged gradients and in the optimizer; each DDP bucket's collective
// (queued from its launch, then running until it finished); checkpoint
// writes; and moments such as the failure that ended the run. Times are this
// host's clock; trace_merge.h aligns the ranks' clocks and writes the file.
//
// Tracks (a track never holds two overlapping slices): "steps" (one slice
// per step), "phases" (data wait, forward, backward, gradient sync,
// optimizer, checkpoint), "events" (instants) and one per bucket.
//
// Thread safety: Instant may be called from any thread; everything else from
// the training thread. Encode/Decode move a trace between processes.
#ifndef DTRAIN_TRAINER_TRACE_STEP_TRACE_H_
#define DTRAIN_TRAINER_TRACE_STEP_TRACE_H_

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "dist/ddp/ddp_types.h"
#include "trainer/trace/step_phases.h"

namespace dtrain::trainer {

// A slice (start_us < or = end_us) or an instant (instant, at start_us), in
// microseconds since the Unix epoch on the recording host's clock.
struct TraceRecord {
  int track = 0;
  std::string name;
  int64_t step = 0;  // 0: not a step's (an instant between steps)
  int64_t start_us = 0;
  int64_t end_us = 0;
  bool instant = false;
  int64_t bytes = -1;  // a bucket's gradient bytes; -1: none
  std::string text;    // an instant's message, a slice's note
};

class StepTrace {
 public:
  static constexpr int kStepsTrack = 0;
  static constexpr int kPhasesTrack = 1;
  static constexpr int kEventsTrack = 2;
  // Bucket b's track is kFirstBucketTrack + b.
  static constexpr int kFirstBucketTrack = 10;

  // Traces optimizer steps first_step to last_step (1-based global step
  // numbers, both included; 1 <= first_step <= last_step).
  StepTrace(int64_t first_step, int64_t last_step);

  int64_t first_step() const { return first_step_; }
  int64_t last_step() const { return last_step_; }
  // The name of `track` ("steps", "bucket 3").
  static std::string TrackName(int track);

  // A wait for one batch of the step about to run; kept until Step says
  // which step that was.
  void DataWait(absl::Time start, absl::Time end);
  // After optimizer step `step` (1-based): its data waits, phases and,
  // with gradient sync, DDP's timeline of it (null: none). Steps outside
  // the traced range only drop their data waits.
  void Step(int64_t step, const StepPhases& phases, const ddp::StepStats* ddp);
  // A checkpoint written after step `step`, when that step is traced.
  void Checkpoint(int64_t step, absl::Time start, absl::Time end);
  // A moment on the events track ("failure", "stall warning"), whatever the
  // step: what ended or troubled the run matters when it happened.
  void Instant(absl::string_view name, absl::string_view text, absl::Time at);

  // What was recorded, in the order it was.
  std::vector<TraceRecord> Records() const;

  // The records as bytes (base/byte_codec.h), and back. Decode: kDataLoss
  // naming what is malformed.
  std::string Encode() const;
  static absl::StatusOr<std::vector<TraceRecord>> Decode(
      absl::string_view bytes);

 private:
  bool Traces(int64_t step) const {
    return step >= first_step_ && step <= last_step_;
  }
  void Slice(int track, absl::string_view name, int64_t step, absl::Time start,
             absl::Time end, int64_t bytes = -1, absl::string_view text = "");

  const int64_t first_step_;
  const int64_t last_step_;
  std::vector<TimeSpan> waits_;  // the coming step's
  mutable std::mutex mu_;
  std::vector<TraceRecord> records_;  // guarded by mu_
};

}  // namespace dtrain::trainer

#endif  // DTRAIN_TRAINER_TRACE_STEP_TRACE_H_
