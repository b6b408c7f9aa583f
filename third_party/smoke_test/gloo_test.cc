// Gloo smoke test: two ranks (threads) connect a full mesh over TCP on loopback
// and allreduce.

#include <memory>
#include <thread>
#include <vector>

#include "gloo/allreduce_ring.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/hash_store.h"
#include "gloo/transport/tcp/device.h"
#include "gtest/gtest.h"
#include "third_party/gloo_compat.h"

namespace {

TEST(GlooSmokeTest, TwoRanksAllReduceOverLoopbackTcp) {
  constexpr int kWorldSize = 2;
  constexpr int kCount = 5;
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  std::vector<std::vector<float>> data(kWorldSize, std::vector<float>(kCount));
  // Contexts outlive both ranks' allreduce so that neither closes its pair
  // while the other still flushes the last step.
  std::vector<std::shared_ptr<gloo::rendezvous::Context>> contexts(kWorldSize);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < kWorldSize; ++rank) {
    ranks.emplace_back([&, rank] {
      for (int i = 0; i < kCount; ++i) data[rank][i] = rank * 10.0f + i;
      gloo::transport::tcp::attr attr("127.0.0.1");
      auto device = gloo::transport::tcp::CreateDevice(attr);
      auto& context = contexts[rank];
      context = std::make_shared<gloo::rendezvous::Context>(rank, kWorldSize);
      dtrain::gloo_compat::ConnectFullMesh(*context, store, device);
      gloo::AllreduceRing<float> allreduce(context, {data[rank].data()},
                                           kCount);
      allreduce.run();
    });
  }
  for (auto& t : ranks) t.join();
  for (int rank = 0; rank < kWorldSize; ++rank) {
    for (int i = 0; i < kCount; ++i) {
      EXPECT_FLOAT_EQ(data[rank][i], 10.0f + 2 * i)
          << "rank " << rank << " index " << i;
    }
  }
}

}  // namespace
