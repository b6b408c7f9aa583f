// Moments worth a mark on a run's timeline, noted by code that knows nothing
// of the trace (a stall warning, in dist/backend/stall) and collected by
// whoever is recording one (trainer/trace) at the time: none, one or several
// (ranks as threads in tests, each taking its own rank's).
//
//   TraceMarkSubscription s = SubscribeTraceMarks(
//       [&](const TraceMark& m) { if (m.rank == my_rank) Keep(m); });
//   ... elsewhere, any thread:
//   NoteTraceMark(rank, "stall warning", line);
//
// Process-wide and thread-safe. Sinks run on the noting thread under a lock:
// they must be quick and must not note or subscribe themselves.
#ifndef DTRAIN_BASE_TRACE_MARKS_H_
#define DTRAIN_BASE_TRACE_MARKS_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace dtrain::base {

struct TraceMark {
  int rank = 0;
  std::string name;
  std::string text;
  absl::Time at;
};

// Unsubscribes its sink when destroyed (after which the sink is not called
// again). Movable, not copyable.
class TraceMarkSubscription {
 public:
  TraceMarkSubscription() = default;
  explicit TraceMarkSubscription(int64_t id) : id_(id) {}
  TraceMarkSubscription(TraceMarkSubscription&& other) noexcept
      : id_(other.id_) {
    other.id_ = 0;
  }
  TraceMarkSubscription& operator=(TraceMarkSubscription&& other) noexcept;
  TraceMarkSubscription(const TraceMarkSubscription&) = delete;
  TraceMarkSubscription& operator=(const TraceMarkSubscription&) = delete;
  ~TraceMarkSubscription();

 private:
  int64_t id_ = 0;  // 0: none
};

// `sink` gets every mark noted while the subscription lives.
TraceMarkSubscription SubscribeTraceMarks(
    std::function<void(const TraceMark&)> sink);

// Hands the mark, stamped now, to every sink; nothing when there is none
// (one uncontended lock).
void NoteTraceMark(int rank, absl::string_view name, absl::string_view text);

}  // namespace dtrain::base

#endif  // DTRAIN_BASE_TRACE_MARKS_H_
