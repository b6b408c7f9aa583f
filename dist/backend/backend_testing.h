// Test helpers for backends: run N ranks as threads, each with its own backend
// over one shared in-memory store, and fill values whose reductions have closed
// forms.
#ifndef DTRAIN_DIST_BACKEND_BACKEND_TESTING_H_
#define DTRAIN_DIST_BACKEND_BACKEND_TESTING_H_

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "dist/backend/backend.h"
#include "dist/rendezvous/store.h"

namespace dtrain::backend::testing {

using BackendFactory = std::function<absl::StatusOr<std::unique_ptr<Backend>>(
    int rank, int world_size, std::shared_ptr<rendezvous::Store> store)>;

// Creates `world_size` backends on threads over one HashStore and runs
// `body(backend)` on each thread. Fails the current test (and skips the body)
// for ranks whose backend cannot be created.
void RunRanks(int world_size, const BackendFactory& factory,
              const std::function<void(Backend&)>& body);

}  // namespace dtrain::backend::testing

#endif  // DTRAIN_DIST_BACKEND_BACKEND_TESTING_H_
