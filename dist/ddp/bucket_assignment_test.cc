#include "dist/ddp/bucket_assignment.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::ddp::internal {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::vector<int>> Members(
    const std::vector<BucketAssignment>& buckets) {
  std::vector<std::vector<int>> out;
  for (const BucketAssignment& b : buckets) out.push_back(b.members);
  return out;
}

TEST(AssignBucketsTest, BucketClosesOnceItReachesItsCapAsInPyTorch) {
  // Caps: first 10 bytes, then 20.
  const std::vector<int64_t> bytes = {4, 4, 4, 8, 8, 8, 20, 1};
  const std::vector<int> keys(bytes.size(), 0);
  auto buckets = AssignBuckets(bytes, keys, {10, 20});
  ASSERT_TRUE(buckets.ok()) << buckets.status();
  EXPECT_THAT(Members(*buckets),
              ElementsAre(ElementsAre(0, 1, 2), ElementsAre(3, 4, 5),
                          ElementsAre(6), ElementsAre(7)));
  EXPECT_EQ((*buckets)[0].bytes, 12);
  EXPECT_EQ((*buckets)[1].bytes, 24);
}

TEST(AssignBucketsTest, LargeTensorClosesTheBucketItJoins) {
  // The ConvNet's shape: small classifier tensors, then a large one, then
  // the convolutions. The large one is sent with the small ones, as soon as
  // backward produces it, not after the convolutions.
  const std::vector<int64_t> bytes = {40, 2560, 256, 1179648, 128, 18432};
  auto buckets = AssignBuckets(bytes, std::vector<int>(6, 0),
                               {int64_t{1} << 20, int64_t{25} << 20});
  ASSERT_TRUE(buckets.ok());
  EXPECT_THAT(Members(*buckets),
              ElementsAre(ElementsAre(0, 1, 2, 3), ElementsAre(4, 5)));
  const std::vector<int64_t> alone = {100, 1, 1, 100};
  buckets = AssignBuckets(alone, std::vector<int>(4, 0), {10, 10});
  ASSERT_TRUE(buckets.ok());
  EXPECT_THAT(Members(*buckets),
              ElementsAre(ElementsAre(0), ElementsAre(1, 2, 3)));
}

TEST(AssignBucketsTest, KeysNeverShareABucketAndBucketsFollowFirstMember) {
  // Two dtypes interleaved: each key fills its own buckets, first cap each.
  const std::vector<int64_t> bytes = {4, 8, 4, 8, 4, 8};
  const std::vector<int> keys = {0, 1, 0, 1, 0, 1};
  auto buckets = AssignBuckets(bytes, keys, {8, 100});
  ASSERT_TRUE(buckets.ok());
  EXPECT_THAT(Members(*buckets),
              ElementsAre(ElementsAre(0, 2), ElementsAre(1), ElementsAre(3, 5),
                          ElementsAre(4)));
}

TEST(AssignBucketsTest, EmptyInputGivesNoBuckets) {
  auto buckets = AssignBuckets({}, {}, {1, 1});
  ASSERT_TRUE(buckets.ok());
  EXPECT_TRUE(buckets->empty());
}

TEST(AssignBucketsTest, RejectsBadInput) {
  EXPECT_THAT(std::string(AssignBuckets({1}, {0}, {0, 10}).status().message()),
              HasSubstr("caps must be positive"));
  EXPECT_THAT(std::string(AssignBuckets({1}, {}, {1, 1}).status().message()),
              HasSubstr("1 sizes but 0 keys"));
  EXPECT_THAT(std::string(AssignBuckets({-1}, {0}, {1, 1}).status().message()),
              HasSubstr("negative size"));
}

}  // namespace
}  // namespace dtrain::ddp::internal
