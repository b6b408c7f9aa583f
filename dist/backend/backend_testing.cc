#include "dist/backend/backend_testing.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "dist/store/hash_store.h"
#include "gtest/gtest.h"

namespace dtrain::backend::testing {

void RunRanks(int world_size, const BackendFactory& factory,
              const std::function<void(Backend&)>& body) {
  auto store = std::make_shared<store::HashStore>(absl::Seconds(60));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world_size; ++rank) {
    threads.emplace_back([&, rank] {
      absl::StatusOr<std::unique_ptr<Backend>> backend =
          factory(rank, world_size, store);
      if (!backend.ok()) {
        ADD_FAILURE() << "rank " << rank << ": " << backend.status();
        return;
      }
      body(**backend);
    });
  }
  for (auto& t : threads) t.join();
}

void Notification::Notify() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    notified_ = true;
  }
  cv_.notify_all();
}

bool Notification::WaitForNotificationWithTimeout(absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(
      lock, absl::ToChronoNanoseconds(std::max(timeout, absl::ZeroDuration())),
      [this] { return notified_; });
}

}  // namespace dtrain::backend::testing
