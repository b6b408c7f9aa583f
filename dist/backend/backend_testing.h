// Test helpers for backends: run N ranks as threads, each with its own backend
// over one shared in-memory store, and fill values whose reductions have closed
// forms.
#ifndef DTRAIN_DIST_BACKEND_BACKEND_TESTING_H_
#define DTRAIN_DIST_BACKEND_BACKEND_TESTING_H_

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dist/backend/backend.h"
#include "dist/store/store.h"

namespace dtrain::backend::testing {

using BackendFactory = std::function<absl::StatusOr<std::unique_ptr<Backend>>(
    int rank, int world_size, std::shared_ptr<store::Store> store)>;

// Creates `world_size` backends on threads over one HashStore and runs
// `body(backend)` on each thread. Fails the current test (and skips the body)
// for ranks whose backend cannot be created.
void RunRanks(int world_size, const BackendFactory& factory,
              const std::function<void(Backend&)>& body);

// A one-shot event between rank threads ("rank 0 is done, the silent peer may
// leave"). Built on std::mutex and std::condition_variable rather than
// Abseil's notification, so that ThreadSanitizer builds see the
// synchronisation (Debian's Abseil is not instrumented).
class Notification {
 public:
  void Notify();
  // True once notified; false when `timeout` passed first.
  bool WaitForNotificationWithTimeout(absl::Duration timeout);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool notified_ = false;  // Guarded by mu_.
};

}  // namespace dtrain::backend::testing

#endif  // DTRAIN_DIST_BACKEND_BACKEND_TESTING_H_
