#include "dist/backend/work.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace dtrain::backend::internal {

std::shared_ptr<Work> CompletionWork::Failed(absl::Status status) {
  auto work = std::make_shared<CompletionWork>();
  work->Complete(std::move(status));
  return work;
}

absl::Status CompletionWork::Wait(absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  // Centuries overflow std::chrono's nanoseconds: treat them as forever.
  if (timeout >= absl::Hours(24 * 365 * 100)) {
    cv_.wait(lock, [this] { return done_; });
  } else if (!cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout),
                           [this] { return done_; })) {
    return absl::DeadlineExceededError(
        absl::StrCat(what_.empty() ? "collective" : what_,
                     " still running after the wait's timeout of ",
                     absl::FormatDuration(timeout)));
  }
  return status_;
}

bool CompletionWork::IsCompleted() {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

absl::Status CompletionWork::status() {
  std::lock_guard<std::mutex> lock(mu_);
  return done_ ? status_ : absl::OkStatus();
}

absl::optional<WorkTimes> CompletionWork::times() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!done_ || !started_.has_value()) return absl::nullopt;
  return WorkTimes{*started_, finished_};
}

void CompletionWork::MarkStarted() {
  const absl::Time now = absl::Now();
  std::lock_guard<std::mutex> lock(mu_);
  if (!done_) started_ = now;
}

void CompletionWork::Complete(absl::Status status) {
  const absl::Time now = absl::Now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;
    done_ = true;
    finished_ = now;
    status_ = std::move(status);
  }
  cv_.notify_all();
}

}  // namespace dtrain::backend::internal
