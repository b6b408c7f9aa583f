// The Work implementation shared by the backends: a one-shot completion that
// the thread running the collective (Gloo's worker, NCCL's event poller)
// completes once, and that any number of threads may wait on. Uses std::mutex
// rather than Abseil's mutex so that ThreadSanitizer builds see the
// synchronisation (Debian's Abseil is not instrumented).
#ifndef DTRAIN_DIST_BACKEND_WORK_H_
#define DTRAIN_DIST_BACKEND_WORK_H_

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "absl/time/time.h"
#include "absl/types/optional.h"
#include "dist/backend/backend.h"

namespace dtrain::backend::internal {

class CompletionWork : public Work {
 public:
  // `what` names the collective in Wait's timeout message: "[rank 0] gloo
  // allreduce #3 (...)".
  explicit CompletionWork(std::string what = "") : what_(std::move(what)) {}

  // A Work that has already failed, for argument errors found before anything
  // was issued.
  static std::shared_ptr<Work> Failed(absl::Status status);

  absl::Status Wait(absl::Duration timeout = absl::InfiniteDuration()) override;
  bool IsCompleted() override;
  absl::Status status() override;

  absl::optional<WorkTimes> times() override;

  // Called by the thread that runs the collective as it starts; Complete
  // then records the end, and times() reports both.
  void MarkStarted();

  // Marks the work finished with `status`; later calls are ignored.
  void Complete(absl::Status status);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  const std::string what_;
  bool done_ = false;
  absl::Status status_;
  absl::optional<absl::Time> started_;
  absl::Time finished_;
};

}  // namespace dtrain::backend::internal

#endif  // DTRAIN_DIST_BACKEND_WORK_H_
