#include "trainer/trace/step_trace.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/byte_codec.h"
#include "base/status_macros.h"

namespace dtrain::trainer {
namespace {

// "DTTRACE" and a version: a peer's bytes from another build are refused.
constexpr absl::string_view kMagic = "DTTRACE1";

}  // namespace

StepTrace::StepTrace(int64_t first_step, int64_t last_step)
    : first_step_(first_step), last_step_(last_step) {}

std::string StepTrace::TrackName(int track) {
  switch (track) {
    case kStepsTrack:
      return "steps";
    case kPhasesTrack:
      return "phases";
    case kEventsTrack:
      return "events";
    default:
      return track >= kFirstBucketTrack
                 ? absl::StrCat("bucket ", track - kFirstBucketTrack)
                 : absl::StrCat("track ", track);
  }
}

void StepTrace::Slice(int track, absl::string_view name, int64_t step,
                      absl::Time start, absl::Time end, int64_t bytes,
                      absl::string_view text) {
  TraceRecord r;
  r.track = track;
  r.name = std::string(name);
  r.step = step;
  r.start_us = absl::ToUnixMicros(start);
  // A clock read on another thread may land a microsecond early.
  r.end_us = std::max(r.start_us, absl::ToUnixMicros(end));
  r.bytes = bytes;
  r.text = std::string(text);
  std::lock_guard<std::mutex> lock(mu_);
  records_.push_back(std::move(r));
}

void StepTrace::DataWait(absl::Time start, absl::Time end) {
  waits_.push_back({start, end});
}

void StepTrace::Step(int64_t step, const StepPhases& phases,
                     const ddp::StepStats* ddp) {
  std::vector<TimeSpan> waits;
  waits.swap(waits_);
  if (!Traces(step)) return;
  const absl::Time begin = !waits.empty() ? waits.front().start
                           : !phases.forward.empty()
                               ? phases.forward.front().start
                               : phases.synchronize.start;
  Slice(kStepsTrack, absl::StrCat("step ", step), step, begin,
        phases.optimizer.end);
  // Micro-batch j: its data wait, forward and backward, in that order.
  const size_t micro_batches = std::max(waits.size(), phases.forward.size());
  for (size_t j = 0; j < micro_batches; ++j) {
    const std::string note =
        micro_batches > 1 ? absl::StrCat("micro-batch ", j + 1) : "";
    if (j < waits.size()) {
      Slice(kPhasesTrack, "data wait", step, waits[j].start, waits[j].end, -1,
            note);
    }
    if (j < phases.forward.size()) {
      Slice(kPhasesTrack, "forward", step, phases.forward[j].start,
            phases.forward[j].end, -1, note);
    }
    if (j < phases.backward.size()) {
      Slice(kPhasesTrack, "backward", step, phases.backward[j].start,
            phases.backward[j].end, -1, note);
    }
  }
  Slice(kPhasesTrack, "gradient sync", step, phases.synchronize.start,
        phases.synchronize.end);
  Slice(kPhasesTrack, "optimizer", step, phases.optimizer.start,
        phases.optimizer.end);
  if (ddp == nullptr || ddp->first_hook == absl::InfinitePast()) return;
  const bool timed =
      ddp->bucket_start_offsets.size() == ddp->bucket_launch_offsets.size();
  for (size_t b = 0; b < ddp->bucket_launch_offsets.size(); ++b) {
    const int track = kFirstBucketTrack + static_cast<int>(b);
    const int64_t bytes =
        b < ddp->bucket_bytes.size() ? ddp->bucket_bytes[b] : -1;
    const absl::Time launched = ddp->first_hook + ddp->bucket_launch_offsets[b];
    if (!timed) {
      // The backend does not time its collectives on the host (NCCL's run on
      // the device): from the launch to the end of the wait for all of them.
      Slice(track, "allreduce", step, launched, phases.synchronize.end, bytes,
            "launch to the end of the gradient sync: the backend does not "
            "time its collectives on the host");
      continue;
    }
    const absl::Time started =
        std::max(launched, ddp->first_hook + ddp->bucket_start_offsets[b]);
    const absl::Time finished =
        std::max(started, ddp->first_hook + ddp->bucket_finish_offsets[b]);
    if (started > launched) {
      Slice(track, "queued", step, launched, started, bytes,
            "launched, waiting for the collectives before it");
    }
    Slice(track, "allreduce", step, started, finished, bytes);
  }
}

void StepTrace::Checkpoint(int64_t step, absl::Time start, absl::Time end) {
  if (Traces(step)) Slice(kPhasesTrack, "checkpoint", step, start, end);
}

void StepTrace::Instant(absl::string_view name, absl::string_view text,
                        absl::Time at) {
  TraceRecord r;
  r.track = kEventsTrack;
  r.name = std::string(name);
  r.start_us = r.end_us = absl::ToUnixMicros(at);
  r.instant = true;
  r.text = std::string(text);
  std::lock_guard<std::mutex> lock(mu_);
  records_.push_back(std::move(r));
}

std::vector<TraceRecord> StepTrace::Records() const {
  std::lock_guard<std::mutex> lock(mu_);
  return records_;
}

std::string StepTrace::Encode() const {
  const std::vector<TraceRecord> records = Records();
  std::string out;
  base::ByteWriter w(&out, "cannot encode the trace: ");
  w.Raw(kMagic);
  // Neither fails: a rank's trace holds far fewer than 2^32 records, and
  // names and notes are short.
  w.Count(records.size(), "records").IgnoreError();
  for (const TraceRecord& r : records) {
    w.U32(static_cast<uint32_t>(r.track));
    w.String(r.name, "name").IgnoreError();
    w.I64(r.step).I64(r.start_us).I64(r.end_us).Bool(r.instant).I64(r.bytes);
    w.String(r.text, "text").IgnoreError();
  }
  return out;
}

absl::StatusOr<std::vector<TraceRecord>> StepTrace::Decode(
    absl::string_view bytes) {
  base::ByteReader r(bytes, 0, "malformed trace: ");
  absl::string_view magic;
  DTRAIN_RETURN_IF_ERROR(r.Raw(kMagic.size(), "magic", &magic));
  if (magic != kMagic) return r.Error("not a trace of this version");
  size_t count = 0;
  // The smallest record: 4 + 4 + 8 * 4 + 1 + 4 bytes.
  DTRAIN_RETURN_IF_ERROR(r.Count("records", 45, &count));
  std::vector<TraceRecord> records(count);
  for (TraceRecord& rec : records) {
    uint32_t track = 0;
    DTRAIN_RETURN_IF_ERROR(r.U32("track", &track));
    rec.track = static_cast<int>(track);
    DTRAIN_RETURN_IF_ERROR(r.String("name", &rec.name));
    DTRAIN_RETURN_IF_ERROR(r.I64("step", &rec.step));
    DTRAIN_RETURN_IF_ERROR(r.I64("start", &rec.start_us));
    DTRAIN_RETURN_IF_ERROR(r.I64("end", &rec.end_us));
    DTRAIN_RETURN_IF_ERROR(r.Bool("instant", &rec.instant));
    DTRAIN_RETURN_IF_ERROR(r.I64("bytes", &rec.bytes));
    DTRAIN_RETURN_IF_ERROR(r.String("text", &rec.text));
    if (rec.end_us < rec.start_us || track > (1u << 20)) {
      return r.Error("a record that ends before it starts or a bad track");
    }
  }
  DTRAIN_RETURN_IF_ERROR(r.ExpectEnd("trace"));
  return records;
}

}  // namespace dtrain::trainer
