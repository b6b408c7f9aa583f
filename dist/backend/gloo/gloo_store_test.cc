// Gloo connects its full mesh through our stores (in memory and TCP) and runs
// an allreduce; store failures surface as gloo exceptions that carry the
// store's message.

#include "dist/backend/gloo/gloo_store.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "dist/store/hash_store.h"
#include "dist/store/prefix_store.h"
#include "dist/store/tcp_store.h"
#include "gloo/allreduce_ring.h"
#include "gloo/common/error.h"
#include "gloo/rendezvous/context.h"
#include "gloo/transport/tcp/device.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "third_party/gloo_compat.h"

namespace dtrain::backend {
namespace {

using store::HashStore;
using store::PrefixStore;
using store::Store;
using store::TcpStore;
using store::TcpStoreOptions;

// Each rank gets its own store handle from `make_store`, connects Gloo and sums
// rank+1.
void AllReduceThroughStores(
    int world_size, const std::function<std::shared_ptr<Store>()>& make_store) {
  std::vector<float> results(world_size, -1);
  std::vector<std::string> errors(world_size);
  // Contexts outlive every rank's allreduce: a rank that closed its pairs
  // while a peer still flushed the last ring step would fail that peer.
  std::vector<std::shared_ptr<gloo::rendezvous::Context>> contexts(world_size);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < world_size; ++rank) {
    ranks.emplace_back([&, rank] {
      try {
        auto store = std::make_shared<GlooStore>(
            std::make_shared<PrefixStore>("gloo", make_store()));
        auto device = gloo::transport::tcp::CreateDevice(
            gloo::transport::tcp::attr("127.0.0.1"));
        contexts[rank] =
            std::make_shared<gloo::rendezvous::Context>(rank, world_size);
        gloo_compat::ConnectFullMesh(*contexts[rank], store, device);
        float value = rank + 1.0f;
        gloo::AllreduceRing<float> allreduce(contexts[rank], {&value}, 1);
        allreduce.run();
        results[rank] = value;
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  }
  for (auto& t : ranks) t.join();
  for (int rank = 0; rank < world_size; ++rank)
    EXPECT_EQ(errors[rank], "") << "rank " << rank;
  const float expected = world_size * (world_size + 1) / 2.0f;
  for (int rank = 0; rank < world_size; ++rank)
    EXPECT_EQ(results[rank], expected);
}

TEST(GlooStoreTest, FullMeshOverHashStore) {
  auto shared = std::make_shared<HashStore>();
  AllReduceThroughStores(4, [&] { return shared; });
}

TEST(GlooStoreTest, FullMeshOverTcpStore) {
  TcpStoreOptions o;
  o.host = o.bind_host = "127.0.0.1";
  o.port = 0;
  o.is_server = true;
  auto server = TcpStore::Create(o);
  ASSERT_TRUE(server.ok()) << server.status();
  AllReduceThroughStores(3, [&]() -> std::shared_ptr<Store> {
    TcpStoreOptions c;
    c.host = "127.0.0.1";
    c.port = (*server)->port();
    auto client = TcpStore::Create(c);
    EXPECT_TRUE(client.ok()) << client.status();
    return *client;
  });
}

TEST(GlooStoreTest, TimeoutBecomesGlooExceptionWithStoreMessage) {
  GlooStore store(std::make_shared<HashStore>());
  try {
    store.wait({"peer/1"}, std::chrono::milliseconds(50));
    FAIL() << "wait on a missing key returned";
  } catch (const gloo::IoException& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("peer/1"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("timed out"));
  }
}

}  // namespace
}  // namespace dtrain::backend
