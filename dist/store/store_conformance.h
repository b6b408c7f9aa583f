// A GoogleTest suite that checks the Store contract (store.h) on any
// implementation. Each store's test links it (target :store_conformance)
// and instantiates it with a factory for that store:
//
//   StoreFactory HashStoreFactory() {
//     StoreFactory f;
//     f.name = "HashStore";
//     f.open = [](absl::Duration timeout) {
//       return std::make_shared<HashStore>(timeout);
//     };
//     // Threads share the one in-memory store: a client is the first
//     // handle, not owned.
//     f.connect = [](Store& first, absl::Duration) {
//       return std::shared_ptr<Store>(&first, [](Store*) {});
//     };
//     return f;
//   }
//
//   INSTANTIATE_TEST_SUITE_P(InMemory, StoreConformanceTest,
//                            ::testing::Values(HashStoreFactory()));
#ifndef DTRAIN_DIST_STORE_STORE_CONFORMANCE_H_
#define DTRAIN_DIST_STORE_STORE_CONFORMANCE_H_

#include <functional>
#include <memory>
#include <ostream>
#include <string>

#include "dist/store/store.h"
#include "gtest/gtest.h"

namespace dtrain::store::testing {

// Makes handles onto one shared store. The fixture calls `open` once per test
// to create the store (the returned handle is the first client), then `connect`
// for each further client (another thread's or rank's handle onto the same
// data), passing the first handle. `close`, if set, runs after all handles are
// gone.
struct StoreFactory {
  std::string name;
  std::function<std::shared_ptr<Store>(absl::Duration timeout)> open;
  std::function<std::shared_ptr<Store>(Store& first, absl::Duration timeout)>
      connect;
  std::function<void()> close;
};

inline std::ostream& operator<<(std::ostream& os, const StoreFactory& f) {
  return os << f.name;
}

class StoreConformanceTest : public ::testing::TestWithParam<StoreFactory> {
 protected:
  void SetUp() override;
  void TearDown() override;

  Store& store() { return *first_; }
  std::shared_ptr<Store> Connect(absl::Duration timeout = absl::Seconds(30));

 private:
  std::shared_ptr<Store> first_;
};

}  // namespace dtrain::store::testing

#endif  // DTRAIN_DIST_STORE_STORE_CONFORMANCE_H_
