// Notices when this process did not run for a while: stopped (SIGSTOP, a
// debugger), its machine suspended, or starved of CPU. An elastic rank asks
// after a failure whether it was the one the others gave up on: a rank that
// was not running past their timeout may have been left behind, and must not
// go on alone from what it last knew (trainer/elastic_run.cc).
#ifndef DTRAIN_BASE_PAUSE_WATCH_H_
#define DTRAIN_BASE_PAUSE_WATCH_H_

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "absl/time/time.h"

namespace dtrain::base {

// A thread that wakes every `period` on the monotonic clock; a wake-up that
// comes late by more than the period means the process was not running in
// between (SIGSTOP stops every thread alike). Thread-safe; the thread stops
// when the watch is destroyed.
class PauseWatch {
 public:
  using Clock = std::function<std::chrono::steady_clock::time_point()>;

  explicit PauseWatch(absl::Duration period = absl::Milliseconds(50));
  // With another clock in place of std::chrono::steady_clock, for tests.
  PauseWatch(absl::Duration period, Clock clock);
  ~PauseWatch();

  PauseWatch(const PauseWatch&) = delete;
  PauseWatch& operator=(const PauseWatch&) = delete;

  // Starts a new span: LongestPause looks at what comes after.
  void Reset();

  // The longest time in the span during which the process did not run, past
  // the period, a pause still going on included (the time since the thread
  // last woke, for a caller that runs before it does after a SIGCONT).
  absl::Duration LongestPause() const;

 private:
  void Loop();

  const std::chrono::nanoseconds period_;
  const Clock clock_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::chrono::steady_clock::time_point last_;
  std::chrono::nanoseconds longest_{0};
  std::thread thread_;
};

}  // namespace dtrain::base

#endif  // DTRAIN_BASE_PAUSE_WATCH_H_
