#include "data/synthetic.h"

#include <ATen/ops/equal.h>

#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::data {
namespace {

using ::testing::HasSubstr;

TEST(SyntheticTest, ShapeLabelsAndDeterminism) {
  SyntheticOptions o;
  o.size = 500;
  o.channels = 3;
  o.height = 8;
  o.width = 5;
  o.num_classes = 7;
  o.seed = 11;
  absl::StatusOr<Dataset> a = MakeSyntheticDataset(o);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->images().sizes(), at::IntArrayRef({500, 3, 8, 5}));
  EXPECT_EQ(a->images().scalar_type(), at::kByte);
  EXPECT_EQ(a->num_classes(), 7);
  std::vector<int> counts(7);
  for (int64_t i = 0; i < 500; ++i) {
    const int64_t label = a->labels()[i].item<int64_t>();
    ASSERT_GE(label, 0);
    ASSERT_LT(label, 7);
    ++counts[label];
  }
  for (int c = 0; c < 7; ++c) EXPECT_GT(counts[c], 30) << "class " << c;

  absl::StatusOr<Dataset> again = MakeSyntheticDataset(o);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(at::equal(a->images(), again->images()));
  EXPECT_TRUE(at::equal(a->labels(), again->labels()));

  o.seed = 12;
  absl::StatusOr<Dataset> other = MakeSyntheticDataset(o);
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(at::equal(a->images(), other->images()));

  // Example i does not depend on the dataset's size.
  o.seed = 11;
  o.size = 10;
  absl::StatusOr<Dataset> prefix = MakeSyntheticDataset(o);
  ASSERT_TRUE(prefix.ok());
  EXPECT_TRUE(at::equal(prefix->images(), a->images().slice(0, 0, 10)));
}

// Examples of a class are closer to each other than to other classes: a
// model can learn the labels.
TEST(SyntheticTest, ClassesAreSeparable) {
  SyntheticOptions o;
  o.size = 200;
  o.num_classes = 4;
  absl::StatusOr<Dataset> d = MakeSyntheticDataset(o);
  ASSERT_TRUE(d.ok());
  const at::Tensor x = d->images().to(at::kFloat).reshape({200, -1});
  const at::Tensor y = d->labels();
  int correct = 0;
  // Nearest neighbour among the other examples.
  for (int64_t i = 0; i < 200; ++i) {
    at::Tensor dist = x.sub(x[i]).pow(2).sum(1);
    dist[i].fill_(1e30);
    const int64_t nearest = dist.argmin().item<int64_t>();
    if (y[nearest].item<int64_t>() == y[i].item<int64_t>()) ++correct;
  }
  EXPECT_GT(correct, 190);
}

TEST(SyntheticTest, RejectsBadOptions) {
  auto error = [](SyntheticOptions o) {
    return MakeSyntheticDataset(o).status();
  };
  SyntheticOptions o;
  o.size = -1;
  EXPECT_THAT(error(o).message(), HasSubstr("size must be >= 0"));
  o = {};
  o.width = 0;
  EXPECT_THAT(error(o).message(), HasSubstr("must be >= 1"));
  o = {};
  o.num_classes = 0;
  EXPECT_THAT(error(o).message(), HasSubstr("num_classes must be >= 1"));
  o = {};
  o.noise = 300;
  EXPECT_THAT(error(o).message(), HasSubstr("noise must be in 0..255"));
  o = {};
  o.size = int64_t{1} << 40;
  EXPECT_THAT(error(o).message(), HasSubstr("exceed 2^40 bytes"));
  o = {};
  o.height = int64_t{1} << 62;
  o.width = 4;
  EXPECT_THAT(error(o).message(), HasSubstr("exceed 2^40 bytes"));
  EXPECT_EQ(error(o).code(), absl::StatusCode::kInvalidArgument);
  o = {};
  o.size = 0;
  EXPECT_TRUE(MakeSyntheticDataset(o).ok());
}

}  // namespace
}  // namespace dtrain::data
