#include "trainer/report/meters.h"

#include <ATen/Functions.h>

#include "gtest/gtest.h"

namespace dtrain::trainer {
namespace {

TEST(MetersTest, AverageMeterWeightsByCount) {
  AverageMeter m;
  EXPECT_EQ(m.average(), 0);
  m.Update(1.0, 3);
  m.Update(3.0, 1);
  EXPECT_EQ(m.last(), 3.0);
  EXPECT_EQ(m.count(), 4);
  EXPECT_DOUBLE_EQ(m.average(), 1.5);
  m.Reset();
  EXPECT_EQ(m.count(), 0);
}

TEST(MetersTest, TopKCountsLabelsAmongTheHighestScores) {
  // Row 0: label 2 is the best; row 1: label 0 is third; row 2: label 1 is
  // the worst of four.
  const at::Tensor logits = at::tensor({0.1f, 0.2f, 0.9f, 0.0f,  //
                                        0.5f, 0.9f, 0.1f, 0.7f,  //
                                        0.4f, 0.0f, 0.3f, 0.2f})
                                .view({3, 4});
  const at::Tensor labels = at::tensor({2, 0, 1}, at::kLong);
  EXPECT_EQ(TopKCorrect(logits, labels, {1, 2, 3, 4}),
            (std::vector<int64_t>{1, 1, 2, 3}));
  // k above the class count counts every row.
  EXPECT_EQ(TopKCorrect(logits, labels, {5}), (std::vector<int64_t>{3}));
  EXPECT_EQ(TopKCorrect(logits.narrow(0, 0, 0), labels.narrow(0, 0, 0), {1}),
            (std::vector<int64_t>{0}));
}

TEST(MetersTest, PercentileInterpolatesAsNumpy) {
  EXPECT_EQ(Percentile({}, 50), 0);
  EXPECT_EQ(Percentile({4, 1, 3, 2}, 0), 1);
  EXPECT_EQ(Percentile({4, 1, 3, 2}, 100), 4);
  EXPECT_DOUBLE_EQ(Percentile({4, 1, 3, 2}, 50), 2.5);
  EXPECT_DOUBLE_EQ(Percentile({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 90), 9.1);
}

}  // namespace
}  // namespace dtrain::trainer
