// RankSync with ranks as threads (Gloo over an in-memory store).
#include "trainer/rank_sync.h"

#include <ATen/Functions.h>

#include <string>
#include <utility>
#include <vector>

#include "dist/backend/backend_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/trainer_testing.h"

namespace dtrain::trainer {
namespace {

using ::testing::ElementsAre;
using testing::Gloo;
using ::testing::HasSubstr;

RankSync Sync(backend::Backend& b) {
  return RankSync(b, c10::Device(c10::kCPU), absl::Seconds(30));
}

TEST(RankSyncTest, SumsAndMaximaAreExact) {
  backend::testing::RunRanks(3, Gloo, [&](backend::Backend& b) {
    const RankSync sync = Sync(b);
    const double big = 9007199254740991.0;  // 2^53 - 1
    absl::StatusOr<std::vector<double>> sum = sync.AllReduce(
        {1.0, b.rank() == 0 ? big - 2 : 1.0}, backend::ReduceOp::kSum);
    ASSERT_TRUE(sum.ok()) << sum.status();
    EXPECT_THAT(*sum, ElementsAre(3.0, big));
    absl::StatusOr<std::vector<double>> max = sync.AllReduce(
        {static_cast<double>(b.rank())}, backend::ReduceOp::kMax);
    ASSERT_TRUE(max.ok()) << max.status();
    EXPECT_THAT(*max, ElementsAre(2.0));
  });
}

TEST(RankSyncTest, BroadcastSendsTheRootsBytes) {
  backend::testing::RunRanks(3, Gloo, [&](backend::Backend& b) {
    std::string bytes = b.rank() == 1 ? std::string("a\0b\xff", 4) : "junk";
    ASSERT_TRUE(Sync(b).Broadcast(1, &bytes).ok());
    EXPECT_EQ(bytes, std::string("a\0b\xff", 4));
    std::string empty = b.rank() == 0 ? "" : "junk";
    ASSERT_TRUE(Sync(b).Broadcast(0, &empty).ok());
    EXPECT_EQ(empty, "");
  });
}

TEST(RankSyncTest, ARootWithNothingToSendFailsEveryRankWithItsReason) {
  backend::testing::RunRanks(3, Gloo, [&](backend::Backend& b) {
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

TEST(RankSyncTest, IdentityCheckNamesTheParameterThatDiffers) {
  backend::testing::RunRanks(2, Gloo, [&](backend::Backend& b) {
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
}  // namespace dtrain::trainer
