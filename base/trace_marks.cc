#include "base/trace_marks.h"

#include <map>
#include <mutex>
#include <utility>

#include "absl/time/clock.h"

namespace dtrain::base {
namespace {

// std::mutex, not absl::Mutex: Debian's Abseil is not built with TSan.
struct Sinks {
  std::mutex mu;
  int64_t next_id = 1;  // guarded by mu
  std::map<int64_t, std::function<void(const TraceMark&)>> sinks;  // by mu
};

// Never destroyed: a thread may note a mark while the process exits.
Sinks& TheSinks() {
  static Sinks* sinks = new Sinks;
  return *sinks;
}

void Unsubscribe(int64_t id) {
  if (id == 0) return;
  Sinks& s = TheSinks();
  std::lock_guard<std::mutex> lock(s.mu);
  s.sinks.erase(id);
}

}  // namespace

TraceMarkSubscription& TraceMarkSubscription::operator=(
    TraceMarkSubscription&& other) noexcept {
  if (this != &other) {
    Unsubscribe(id_);
    id_ = other.id_;
    other.id_ = 0;
  }
  return *this;
}

TraceMarkSubscription::~TraceMarkSubscription() { Unsubscribe(id_); }

TraceMarkSubscription SubscribeTraceMarks(
    std::function<void(const TraceMark&)> sink) {
  Sinks& s = TheSinks();
  std::lock_guard<std::mutex> lock(s.mu);
  const int64_t id = s.next_id++;
  s.sinks.emplace(id, std::move(sink));
  return TraceMarkSubscription(id);
}

void NoteTraceMark(int rank, absl::string_view name, absl::string_view text) {
  Sinks& s = TheSinks();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.sinks.empty()) return;
  const TraceMark mark{rank, std::string(name), std::string(text), absl::Now()};
  for (const auto& [id, sink] : s.sinks) sink(mark);
}

}  // namespace dtrain::base
