#include "base/pause_watch.h"

#include <algorithm>
#include <utility>

namespace dtrain::base {

PauseWatch::PauseWatch(absl::Duration period)
    : PauseWatch(period, [] { return std::chrono::steady_clock::now(); }) {}

PauseWatch::PauseWatch(absl::Duration period, Clock clock)
    : period_(absl::ToChronoNanoseconds(period)),
      clock_(std::move(clock)),
      last_(clock_()),
      thread_([this] { Loop(); }) {}

PauseWatch::~PauseWatch() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void PauseWatch::Reset() {
  std::lock_guard<std::mutex> lock(mu_);
  last_ = clock_();
  longest_ = std::chrono::nanoseconds(0);
}

absl::Duration PauseWatch::LongestPause() const {
  std::lock_guard<std::mutex> lock(mu_);
  const std::chrono::nanoseconds now_gap = clock_() - last_ - period_;
  return absl::FromChrono(
      std::max({longest_, now_gap, std::chrono::nanoseconds::zero()}));
}

void PauseWatch::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, period_, [this] { return stop_; })) {
    const std::chrono::steady_clock::time_point now = clock_();
    longest_ = std::max(longest_, now - last_ - period_);
    last_ = now;
  }
}

}  // namespace dtrain::base
