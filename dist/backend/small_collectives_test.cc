// SmallCollectives with ranks as threads (Gloo over an in-memory store).
#include "dist/backend/small_collectives.h"

#include <ATen/Functions.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dist/backend/backend_testing.h"
#include "dist/backend/factory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::backend {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

absl::StatusOr<std::unique_ptr<Backend>> Gloo(
    int rank, int world_size, std::shared_ptr<store::Store> store) {
  Membership group;
  group.rank = rank;
  group.world_size = world_size;
  group.store = std::move(store);
  group.timeout = absl::Seconds(60);
  BackendConfig config;
  config.name = "gloo";
  config.shm = false;
  config.gloo_hostname = "127.0.0.1";
  return CreateBackend(group, config);
}

SmallCollectives Sync(Backend& b) {
  return SmallCollectives(b, c10::Device(c10::kCPU), absl::Seconds(30));
}

TEST(SmallCollectivesTest, SumsAndMaximaAreExact) {
  testing::RunRanks(3, Gloo, [&](Backend& b) {
    const SmallCollectives sync = Sync(b);
    const double big = 9007199254740991.0;  // 2^53 - 1
    absl::StatusOr<std::vector<double>> sum =
        sync.AllReduce({1.0, b.rank() == 0 ? big - 2 : 1.0}, ReduceOp::kSum);
    ASSERT_TRUE(sum.ok()) << sum.status();
    EXPECT_THAT(*sum, ElementsAre(3.0, big));
    absl::StatusOr<std::vector<double>> max =
        sync.AllReduce({static_cast<double>(b.rank())}, ReduceOp::kMax);
    ASSERT_TRUE(max.ok()) << max.status();
    EXPECT_THAT(*max, ElementsAre(2.0));
  });
}

TEST(SmallCollectivesTest, BroadcastSendsTheRootsBytes) {
  testing::RunRanks(3, Gloo, [&](Backend& b) {
    std::string bytes = b.rank() == 1 ? std::string("a\0b\xff", 4) : "junk";
    ASSERT_TRUE(Sync(b).Broadcast(1, &bytes).ok());
    EXPECT_EQ(bytes, std::string("a\0b\xff", 4));
    std::string empty = b.rank() == 0 ? "" : "junk";
    ASSERT_TRUE(Sync(b).Broadcast(0, &empty).ok());
    EXPECT_EQ(empty, "");
  });
}

TEST(SmallCollectivesTest, ARootWithNothingToSendFailsEveryRankWithItsReason) {
  testing::RunRanks(3, Gloo, [&](Backend& b) {
    std::string bytes;
    absl::Status s = Sync(b).Broadcast(
        0, &bytes, absl::DataLossError("ck: only damaged checkpoints"));
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    if (b.rank() == 0) {
      EXPECT_EQ(s.message(), "ck: only damaged checkpoints");
    } else {
      EXPECT_EQ(s.message(), "rank 0: ck: only damaged checkpoints");
    }
    // The group is still in step afterwards.
    std::string after = b.rank() == 0 ? "next" : "";
    ASSERT_TRUE(Sync(b).Broadcast(0, &after).ok());
    EXPECT_EQ(after, "next");
  });
}

TEST(SmallCollectivesTest, IdentityCheckNamesTheParameterThatDiffers) {
  testing::RunRanks(2, Gloo, [&](Backend& b) {
    std::vector<std::pair<std::string, at::Tensor>> params = {
        {"conv.weight", at::ones({3, 3})},
        {"fc.bias", at::full({4}, b.rank() == 1 ? 0.5 : 0.25)},
        {"fc.weight", at::zeros({2, 4}, at::kDouble)}};
    absl::Status s = Sync(b).CheckIdentical(params);
    EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("1 of 3 parameters differ between the ranks: "
                          "fc.bias;"));
    params.erase(params.begin() + 1);
    EXPECT_TRUE(Sync(b).CheckIdentical(params).ok());
  });
}

}  // namespace
}  // namespace dtrain::backend
