#include "dist/ddp/model_fingerprint.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::ddp::internal {
namespace {

using ::testing::ElementsAre;

const std::vector<std::string> kModel = {"parameter fc1.weight [16, 8] float32",
                                         "parameter fc1.bias [16] float32",
                                         "parameter fc2.weight [4, 16] float32",
                                         "buffer bn.running_mean [4] float32"};

TEST(FingerprintTest, StableAndSensitiveToContentAndSplitting) {
  // FNV-1a of the empty list is the offset basis: the value is part of the
  // cross-process contract.
  EXPECT_EQ(Fingerprint({}), 14695981039346656037ull);
  EXPECT_EQ(Fingerprint(kModel), Fingerprint(kModel));
  std::vector<std::string> other = kModel;
  other[2] = "parameter fc2.weight [4, 17] float32";
  EXPECT_NE(Fingerprint(kModel), Fingerprint(other));
  EXPECT_NE(Fingerprint({"ab", "c"}), Fingerprint({"a", "bc"}));
}

TEST(FingerprintTest, JoinAndSplitRoundTrip) {
  EXPECT_EQ(SplitEntries(JoinEntries(kModel)), kModel);
  EXPECT_TRUE(SplitEntries(JoinEntries({})).empty());
}

TEST(FormatRanksTest, CollapsesRuns) {
  EXPECT_EQ(FormatRanks({3}), "rank 3");
  EXPECT_EQ(FormatRanks({0, 2}), "ranks 0, 2");
  EXPECT_EQ(FormatRanks({0, 1}), "ranks 0, 1");
  EXPECT_EQ(FormatRanks({0, 1, 2, 3, 4, 5, 7}), "ranks 0-5, 7");
}

TEST(DescribeFirstMismatchTest, EqualModelsHaveNone) {
  EXPECT_EQ(DescribeFirstMismatch({kModel, kModel, kModel}), "");
  EXPECT_EQ(DescribeFirstMismatch({}), "");
}

TEST(DescribeFirstMismatchTest, NamesTheEntryAndTheRanksOnEachSide) {
  std::vector<std::string> other = kModel;
  other[2] = "parameter fc2.weight [4, 17] float32";
  other[3] = "buffer bn.running_var [4] float32";  // Later: not reported.
  EXPECT_EQ(DescribeFirstMismatch({kModel, other, kModel}),
            "entry 3 of 4: ranks 0, 2 have parameter fc2.weight [4, 16] "
            "float32; rank 1 has parameter fc2.weight [4, 17] float32");
}

TEST(DescribeFirstMismatchTest, MissingEntries) {
  std::vector<std::string> shorter(kModel.begin(), kModel.end() - 1);
  EXPECT_EQ(DescribeFirstMismatch({kModel, kModel, shorter, shorter}),
            "entry 4 of 4: ranks 0, 1 have buffer bn.running_mean [4] "
            "float32; ranks 2, 3 have nothing there (3 entries in all)");
  EXPECT_THAT(SplitEntries("a\nb"), ElementsAre("a", "b"));
}

}  // namespace
}  // namespace dtrain::ddp::internal
