#include "data/dataset.h"

#include <ATen/ops/arange.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::data {
namespace {

using ::testing::HasSubstr;

TEST(DatasetTest, CreateChecksAndConvertsLabels) {
  const at::Tensor images = at::zeros({3, 1, 2, 2}, at::kByte);
  const at::Tensor labels = at::tensor(std::vector<int32_t>{2, 0, 1}, at::kInt);
  absl::StatusOr<Dataset> d = Dataset::Create("d", images, labels, 3);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->size(), 3);
  EXPECT_EQ(d->labels().scalar_type(), at::kLong);
  EXPECT_EQ(d->example_shape(), (std::vector<int64_t>{1, 2, 2}));
  EXPECT_EQ(d->DebugString(), "d: 3 x [1, 2, 2] Byte, 3 classes");
}

TEST(DatasetTest, CreateRejectsInconsistentTensors) {
  const at::Tensor images = at::zeros({3, 1, 2, 2}, at::kByte);
  const at::Tensor labels =
      at::tensor(std::vector<int64_t>{2, 0, 1}, at::kLong);
  struct Case {
    at::Tensor images, labels;
    int64_t classes;
    const char* message;
  };
  const std::vector<Case> cases = {
      {at::zeros({3, 2, 2}, at::kByte), labels, 3,
       "images must be [N, C, H, W]"},
      {at::zeros({3, 0, 2, 2}, at::kByte), labels, 3, "C, H, W >= 1"},
      {images, labels.slice(0, 0, 2), 3, "3 images but 2 labels"},
      {images, labels.reshape({3, 1}), 3, "labels must be one-dimensional"},
      {images, labels.to(at::kFloat), 3, "labels must have an integer dtype"},
      {images, labels, 2, "label 2 of example 0 is outside [0, 2)"},
      {images, at::tensor(std::vector<int64_t>{0, -4, 1}, at::kLong), 3,
       "label -4 of example 1"},
      {images, labels, 0, "num_classes must be >= 1"},
      {at::Tensor(), labels, 3, "defined"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<Dataset> d =
        Dataset::Create("bad", c.images, c.labels, c.classes);
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument)
        << c.message;
    EXPECT_THAT(d.status().message(), HasSubstr(c.message));
    EXPECT_THAT(d.status().message(), HasSubstr("dataset 'bad'"));
  }
}

TEST(DatasetTest, SliceSharesMemory) {
  const at::Tensor images =
      at::arange(5 * 4, at::TensorOptions().dtype(at::kFloat))
          .reshape({5, 1, 2, 2});
  absl::StatusOr<Dataset> d = Dataset::Create(
      "d", images, at::tensor(std::vector<int64_t>{0, 1, 0, 1, 0}, at::kLong),
      2);
  ASSERT_TRUE(d.ok());
  absl::StatusOr<Dataset> s = d->Slice(1, 3);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->size(), 2);
  EXPECT_EQ(s->name(), "d[1:3]");
  EXPECT_TRUE(at::equal(s->images(), images.slice(0, 1, 3)));
  EXPECT_EQ(s->images().data_ptr(), images[1].data_ptr());
  EXPECT_FALSE(d->Slice(2, 1).ok());
  EXPECT_FALSE(d->Slice(0, 6).ok());
  EXPECT_TRUE(d->Slice(5, 5).ok());
}

TEST(DatasetTest, SplitNames) {
  EXPECT_EQ(SplitName(Split::kTrain), "train");
  EXPECT_EQ(SplitName(Split::kTest), "test");
}

}  // namespace
}  // namespace dtrain::data
