// The shares of a bucket: every element in exactly one rank's share, shares
// of ceil(numel / world) elements in rank order, and each parameter's
// pieces where its elements are.

#include "dist/zero/shard_layout.h"

#include <vector>

#include "gtest/gtest.h"

namespace dtrain::zero {
namespace {

TEST(ShardLayoutTest, EveryElementInExactlyOneShare) {
  const std::vector<std::vector<int64_t>> buckets = {
      {7, 1, 12}, {3}, {1, 1}, {100, 27, 5}};
  for (int world : {1, 2, 3, 4, 5}) {
    for (size_t b = 0; b < buckets.size(); ++b) {
      std::vector<int> owners;  // per element of the bucket
      std::vector<int> seen;    // per element: pieces covering it
      for (int r = 0; r < world; ++r) {
        const BucketShard s = PlanShards(buckets, r, world)[b];
        if (owners.empty()) {
          owners.assign(s.numel, -1);
          seen.assign(s.numel, 0);
        }
        EXPECT_EQ(s.share, (s.numel + world - 1) / world);
        int64_t covered = 0;
        for (const ParamPiece& p : s.pieces) {
          EXPECT_EQ(p.share_offset, covered) << "pieces in order, no gaps";
          covered += p.numel;
          for (int64_t i = 0; i < p.numel; ++i) {
            ++seen[s.param_offsets[p.param] + p.param_offset + i];
          }
        }
        EXPECT_EQ(covered, s.length);
        for (int64_t i = s.begin; i < s.begin + s.length; ++i) {
          EXPECT_EQ(owners[i], -1);
          owners[i] = r;
        }
      }
      for (size_t i = 0; i < owners.size(); ++i) {
        EXPECT_EQ(owners[i],
                  static_cast<int>(i / ((owners.size() + world - 1) / world)))
            << "bucket " << b << " world " << world << " element " << i;
        EXPECT_EQ(seen[i], 1);
      }
    }
  }
}

TEST(ShardLayoutTest, SharesOfAnUnevenBucket) {
  // 20 elements over 3 ranks: shares of 7, the last one 6.
  const std::vector<std::vector<int64_t>> buckets = {{7, 1, 12}};
  const BucketShard r0 = PlanShards(buckets, 0, 3)[0];
  const BucketShard r2 = PlanShards(buckets, 2, 3)[0];
  EXPECT_EQ(r0.share, 7);
  EXPECT_EQ(r0.length, 7);
  ASSERT_EQ(r0.pieces.size(), 1u);
  EXPECT_EQ(r0.pieces[0].numel, 7);
  EXPECT_EQ(r2.begin, 14);
  EXPECT_EQ(r2.length, 6);
  ASSERT_EQ(r2.pieces.size(), 1u);
  EXPECT_EQ(r2.pieces[0].param, 2);
  EXPECT_EQ(r2.pieces[0].param_offset, 6);
  // A bucket smaller than the world: the last ranks' shares are empty.
  const BucketShard tiny = PlanShards({{2}}, 3, 4)[0];
  EXPECT_EQ(tiny.share, 1);
  EXPECT_EQ(tiny.length, 0);
  EXPECT_TRUE(tiny.pieces.empty());
}

}  // namespace
}  // namespace dtrain::zero
