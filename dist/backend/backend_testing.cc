#include "dist/backend/backend_testing.h"

#include <thread>
#include <vector>

#include "dist/rendezvous/hash_store.h"
#include "gtest/gtest.h"

namespace dtrain::backend::testing {

void RunRanks(int world_size, const BackendFactory& factory,
              const std::function<void(Backend&)>& body) {
  auto store = std::make_shared<rendezvous::HashStore>(absl::Seconds(60));
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

}  // namespace dtrain::backend::testing
