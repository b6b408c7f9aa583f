// The c10d-backed store against an in-process c10d TCPStore server of the
// LibTorch it is built with, as torchrun's agent runs one: the whole Store
// contract (store_conformance), and a server that is not there.

#include "dist/store/c10d_store.h"

#include <torch/version.h>

#include <memory>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "absl/time/clock.h"
#include "dist/store/store_conformance.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::store {
namespace {

using ::testing::HasSubstr;
using testing::StoreConformanceTest;
using testing::StoreFactory;

// The agent's side: a c10d server on a free port.
std::shared_ptr<c10d::TCPStore> StartServer() {
  c10d::TCPStoreOptions o;
  o.port = 0;
  o.isServer = true;
  o.waitWorkers = false;
  o.multiTenant = true;
#if TORCH_VERSION_MAJOR > 2 || \
    (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  o.useLibUV = false;
#endif
  return std::make_shared<c10d::TCPStore>("127.0.0.1", o);
}

StoreFactory C10dFactory() {
  auto server = std::make_shared<std::shared_ptr<c10d::TCPStore>>();
  StoreFactory f;
  f.name = "C10dStore";
  auto connect = [server](absl::Duration timeout) {
    C10dStoreOptions o;
    o.port = (*server)->getPort();
    o.timeout = timeout;
    absl::StatusOr<std::shared_ptr<C10dStore>> s = C10dStore::Connect(o);
    EXPECT_TRUE(s.ok()) << s.status();
    return std::shared_ptr<Store>(s.ok() ? *s : nullptr);
  };
  f.open = [server, connect](absl::Duration timeout) {
    *server = StartServer();
    return connect(timeout);
  };
  f.connect = [connect](Store&, absl::Duration timeout) {
    return connect(timeout);
  };
  f.close = [server] { server->reset(); };
  return f;
}

INSTANTIATE_TEST_SUITE_P(C10d, StoreConformanceTest,
                         ::testing::Values(C10dFactory()));

TEST(C10dStoreTest, NoServerIsUnavailableNamingTheAddress) {
  C10dStoreOptions o;
  o.port = 1;  // Nothing listens there.
  o.timeout = absl::Seconds(2);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::shared_ptr<C10dStore>> s = C10dStore::Connect(o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(s.status().message()),
              HasSubstr("torchrun's agent store at c10d tcp://127.0.0.1:1"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
}

}  // namespace
}  // namespace dtrain::store
