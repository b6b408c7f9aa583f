#include "data/transforms.h"

#include <ATen/ops/arange.h>
#include <ATen/ops/constant_pad_nd.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/flip.h>
#include <ATen/ops/full.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>

#include <cstdint>
#include <set>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::data {
namespace {

using ::testing::HasSubstr;

TransformPipeline Build(TransformPipeline::Builder& builder) {
  absl::StatusOr<TransformPipeline> p = builder.Build();
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *std::move(p) : TransformPipeline();
}

std::vector<uint64_t> Seeds(int64_t n, uint64_t base = 0) {
  std::vector<uint64_t> seeds(n);
  for (int64_t i = 0; i < n; ++i) seeds[i] = base + i;
  return seeds;
}

at::Tensor ApplyAll(const TransformPipeline& p, const at::Tensor& batch,
                    const std::vector<uint64_t>& seeds) {
  absl::StatusOr<at::Tensor> out = p.Apply(batch, seeds);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : at::Tensor();
}

at::Tensor Bytes(std::vector<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return at::arange(n, at::TensorOptions().dtype(at::kLong))
      .remainder(256)
      .to(at::kByte)
      .reshape(shape);
}

TEST(TransformsTest, ToFloatDividesBy255) {
  TransformPipeline::Builder b;
  const TransformPipeline p = Build(b.ToFloat());
  const at::Tensor in = Bytes({1, 1, 16, 16});
  const at::Tensor out = ApplyAll(p, in, Seeds(1));
  ASSERT_EQ(out.scalar_type(), at::kFloat);
  const uint8_t* src = in.data_ptr<uint8_t>();
  const float* dst = out.data_ptr<float>();
  for (int i = 0; i < 256; ++i) {
    EXPECT_EQ(dst[i], static_cast<float>(src[i]) / 255.f) << i;
  }
  EXPECT_EQ(dst[255], 1.f);
  // Floating-point input passes through; other types are refused.
  EXPECT_TRUE(at::equal(ApplyAll(p, out, Seeds(1)), out));
  absl::StatusOr<at::Tensor> ints =
      p.Apply(at::zeros({1, 1, 2, 2}, at::kInt), Seeds(1));
  EXPECT_EQ(ints.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ints.status().message(), HasSubstr("ToFloat: takes uint8"));
}

TEST(TransformsTest, NormalizePerChannel) {
  TransformPipeline::Builder b;
  const TransformPipeline p = Build(b.Normalize({0.5, 1.0}, {0.25, 2.0}));
  at::Tensor in = at::zeros({2, 2, 1, 2}, at::kFloat);
  in.select(0, 0).select(0, 0).fill_(1.0);
  in.select(0, 1).select(0, 1).fill_(3.0);
  const at::Tensor out = ApplyAll(p, in, Seeds(2));
  const std::vector<float> expected = {2, 2, -0.5, -0.5, -2, -2, 1, 1};
  ASSERT_EQ(out.numel(), 8);
  for (int i = 0; i < 8; ++i)
    EXPECT_FLOAT_EQ(out.data_ptr<float>()[i], expected[i]);
  EXPECT_EQ(in.data_ptr<float>()[0], 1.0f) << "the input was modified";

  absl::StatusOr<at::Tensor> three =
      p.Apply(at::zeros({1, 3, 2, 2}, at::kFloat), Seeds(1));
  EXPECT_THAT(three.status().message(),
              HasSubstr("has 2 values per statistic for a batch with 3 "
                        "channels"));
  absl::StatusOr<at::Tensor> bytes =
      p.Apply(at::zeros({1, 2, 2, 2}, at::kByte), Seeds(1));
  EXPECT_THAT(bytes.status().message(), HasSubstr("add ToFloat before it"));

  // One value for all channels, as for Fashion-MNIST.
  TransformPipeline::Builder one;
  const TransformPipeline q =
      Build(one.Normalize({kFashionMnistMean}, {kFashionMnistStd}));
  const at::Tensor r =
      ApplyAll(q, at::full({1, 3, 1, 1}, 1.0, at::kFloat), Seeds(1));
  EXPECT_FLOAT_EQ(r.data_ptr<float>()[2],
                  (1.0f - static_cast<float>(kFashionMnistMean)) /
                      static_cast<float>(kFashionMnistStd));
}

// ToFloat followed by Normalize runs as one fused pass on uint8 batches; the
// result must be bit-identical to the two steps run apart.
TEST(TransformsTest, FusedToFloatNormalizeIsExact) {
  TransformPipeline::Builder b;
  const TransformPipeline p = Build(
      b.ToFloat().Normalize({0.485, 0.456, 0.406}, {0.229, 0.224, 0.225}));
  const at::Tensor in = Bytes({4, 3, 16, 16});
  const std::vector<uint64_t> seeds = Seeds(4);
  const at::Tensor fused = ApplyAll(p, in, seeds);
  absl::StatusOr<at::Tensor> as_float = p.Apply(in, seeds, 0, 1);
  ASSERT_TRUE(as_float.ok());
  absl::StatusOr<at::Tensor> apart = p.Apply(*as_float, seeds, 1, 2);
  ASSERT_TRUE(apart.ok());
  EXPECT_TRUE(at::equal(fused, *apart));
  // Written out for one value: (255 / 255 - 0.406) / 0.225 in float.
  EXPECT_EQ(fused.data_ptr<float>()[2 * 256 + 255], (1.f - 0.406f) / 0.225f);
  // A channel mismatch is still reported by Normalize.
  absl::StatusOr<at::Tensor> gray = p.Apply(Bytes({1, 2, 2, 2}), Seeds(1));
  EXPECT_THAT(gray.status().message(),
              HasSubstr("transform 1 of [ToFloat -> Normalize"));
}

TEST(TransformsTest, ResizeMatchesPyTorchBilinear) {
  // torch.nn.functional.interpolate(x, size=(3, 5), mode='bilinear',
  // align_corners=False) on x = arange(12).reshape(2, 1, 2, 3) * [1, 10].
  const std::vector<float> expected = {
      0.0,  0.4,  1.0,  1.6,  2.0,  1.5,  1.9,  2.5,   3.1,   3.5,
      3.0,  3.4,  4.0,  4.6,  5.0,  60.0, 64.0, 70.0,  76.0,  80.0,
      75.0, 79.0, 85.0, 91.0, 95.0, 90.0, 94.0, 100.0, 106.0, 110.0};
  at::Tensor x = at::arange(12, at::TensorOptions().dtype(at::kFloat))
                     .reshape({2, 1, 2, 3});
  x.select(0, 1).mul_(10);
  TransformPipeline::Builder b;
  const TransformPipeline p = Build(b.Resize(3, 5));
  const at::Tensor out = ApplyAll(p, x, Seeds(2));
  ASSERT_EQ(out.sizes(), at::IntArrayRef({2, 1, 3, 5}));
  for (int i = 0; i < 30; ++i) {
    EXPECT_NEAR(out.data_ptr<float>()[i], expected[i], 1e-4) << i;
  }
}

TEST(TransformsTest, ResizeKeepsUint8AndRoundsLikeTorchvision) {
  // torch.round(interpolate(u.float(), size=(4, 4), ...)).to(torch.uint8).
  const std::vector<uint8_t> expected = {0,  159, 163, 10, 25,  129, 130, 27,
                                         75, 69,  64,  60, 100, 39,  31,  77};
  const at::Tensor u =
      at::tensor(std::vector<uint8_t>{0, 255, 10, 100, 3, 77}, at::kByte)
          .reshape({1, 1, 2, 3});
  TransformPipeline::Builder b;
  const at::Tensor out = ApplyAll(Build(b.Resize(4, 4)), u, Seeds(1));
  ASSERT_EQ(out.scalar_type(), at::kByte);
  ASSERT_EQ(out.numel(), 16);
  for (int i = 0; i < 16; ++i)
    EXPECT_EQ(out.data_ptr<uint8_t>()[i], expected[i]) << i;
}

TEST(TransformsTest, GrayscaleToRgbRepeatsTheChannel) {
  TransformPipeline::Builder b;
  const TransformPipeline p = Build(b.GrayscaleToRgb());
  const at::Tensor in = Bytes({2, 1, 3, 3});
  const at::Tensor out = ApplyAll(p, in, Seeds(2));
  ASSERT_EQ(out.sizes(), at::IntArrayRef({2, 3, 3, 3}));
  ASSERT_TRUE(out.is_contiguous());
  for (int c = 0; c < 3; ++c) {
    EXPECT_TRUE(at::equal(out.select(1, c), in.select(1, 0)));
  }
  absl::StatusOr<at::Tensor> rgb = p.Apply(out, Seeds(2));
  EXPECT_THAT(rgb.status().message(), HasSubstr("takes one-channel batches"));
}

TEST(TransformsTest, RandomCropCutsAWindowOfThePaddedImage) {
  const int64_t n = 300;
  const at::Tensor in = Bytes({n, 2, 5, 6}).add(1);  // No zeros: padding shows.
  TransformPipeline::Builder b;
  const TransformPipeline p = Build(b.RandomCrop(4, 4, /*padding=*/1));
  const at::Tensor out = ApplyAll(p, in, Seeds(n, 1000));
  ASSERT_EQ(out.sizes(), at::IntArrayRef({n, 2, 4, 4}));
  const at::Tensor padded = at::constant_pad_nd(in, {1, 1, 1, 1}, 0);
  std::set<std::pair<int, int>> offsets;
  for (int64_t i = 0; i < n; ++i) {
    int found = 0;
    for (int top = 0; top <= 7 - 4; ++top) {
      for (int left = 0; left <= 8 - 4; ++left) {
        if (at::equal(
                out[i],
                padded[i].slice(1, top, top + 4).slice(2, left, left + 4))) {
          offsets.insert({top, left});
          ++found;
        }
      }
    }
    ASSERT_GE(found, 1) << "example " << i << " is not a window";
  }
  // 4 x 5 possible windows; 300 draws hit them all.
  EXPECT_EQ(offsets.size(), 20u);
  // Same seeds, same crops; example i depends on seeds[i] only.
  EXPECT_TRUE(at::equal(ApplyAll(p, in, Seeds(n, 1000)), out));
  const at::Tensor last = ApplyAll(p, in.slice(0, n - 1, n), {1000 + n - 1});
  EXPECT_TRUE(at::equal(last[0], out[n - 1]));

  TransformPipeline::Builder big;
  absl::StatusOr<at::Tensor> too_big =
      Build(big.RandomCrop(8, 8)).Apply(in, Seeds(n));
  EXPECT_THAT(too_big.status().message(),
              HasSubstr("the window is larger than the padded image 5 x 6"));
}

TEST(TransformsTest, RandomCropKeepsFloatValues) {
  const at::Tensor in = Bytes({10, 3, 8, 8}).to(at::kFloat).div(7);
  TransformPipeline::Builder b;
  const at::Tensor out = ApplyAll(Build(b.RandomCrop(8, 8)), in, Seeds(10));
  EXPECT_TRUE(at::equal(out, in));  // No padding, full size: the identity.
}

TEST(TransformsTest, RandomHorizontalFlip) {
  const int64_t n = 1000;
  const at::Tensor in = Bytes({n, 1, 2, 3}).to(at::kFloat);
  const at::Tensor mirrored = at::flip(in, {3});
  for (double p : {0.0, 1.0}) {
    TransformPipeline::Builder b;
    const at::Tensor out =
        ApplyAll(Build(b.RandomHorizontalFlip(p)), in, Seeds(n));
    EXPECT_TRUE(at::equal(out, p == 0 ? in : mirrored)) << p;
  }
  TransformPipeline::Builder b;
  const TransformPipeline half = Build(b.RandomHorizontalFlip(0.5));
  const at::Tensor out = ApplyAll(half, in, Seeds(n));
  int flipped = 0;
  for (int64_t i = 0; i < n; ++i) {
    const bool same = at::equal(out[i], in[i]);
    const bool mirror = at::equal(out[i], mirrored[i]);
    ASSERT_TRUE(same || mirror) << i;
    flipped += mirror ? 1 : 0;
  }
  // Binomial(1000, 0.5): 400..600 holds with probability 1 - 2e-10.
  EXPECT_GT(flipped, 400);
  EXPECT_LT(flipped, 600);
  EXPECT_TRUE(at::equal(ApplyAll(half, in, Seeds(n)), out));
  EXPECT_FALSE(at::equal(ApplyAll(half, in, Seeds(n, 5000)), out));
}

TEST(TransformsTest, PipelineSplitsIntoDeterministicPrefixAndRest) {
  TransformPipeline::Builder b;
  const TransformPipeline p = Build(b.ToFloat()
                                        .Normalize({0.5}, {0.5})
                                        .RandomCrop(6, 6, 1)
                                        .GrayscaleToRgb()
                                        .RandomHorizontalFlip());
  EXPECT_EQ(p.size(), 5u);
  EXPECT_EQ(p.deterministic_prefix_size(), 2u);
  EXPECT_EQ(p.ToString(),
            "ToFloat -> Normalize(mean=[0.5], std=[0.5]) -> RandomCrop(6, 6, "
            "padding=1) -> GrayscaleToRgb -> RandomHorizontalFlip(p=0.5)");
  const at::Tensor in = Bytes({8, 1, 6, 6});
  const std::vector<uint64_t> seeds = Seeds(8, 77);
  const at::Tensor whole = ApplyAll(p, in, seeds);
  absl::StatusOr<at::Tensor> head = p.Apply(in, seeds, 0, 2);
  ASSERT_TRUE(head.ok());
  absl::StatusOr<at::Tensor> tail = p.Apply(*head, seeds, 2);
  ASSERT_TRUE(tail.ok());
  EXPECT_TRUE(at::equal(whole, *tail));
  EXPECT_EQ(whole.sizes(), at::IntArrayRef({8, 3, 6, 6}));
  EXPECT_EQ(TransformPipeline().ToString(), "Identity");
}

TEST(TransformsTest, PipelineNamesTheFailingTransform) {
  TransformPipeline::Builder b;
  const TransformPipeline p = Build(b.Normalize({0.5}, {0.5}));
  absl::StatusOr<at::Tensor> out = p.Apply(Bytes({1, 1, 2, 2}), Seeds(1));
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(),
              HasSubstr("transform 0 of [Normalize(mean=[0.5], std=[0.5])]: "
                        "Normalize(mean=[0.5], std=[0.5]): takes float32"));
  EXPECT_THAT(p.Apply(Bytes({2, 1, 2, 2}), Seeds(1)).status().message(),
              HasSubstr("1 seeds for a batch of 2"));
  EXPECT_THAT(p.Apply(Bytes({2, 2, 2}), Seeds(2)).status().message(),
              HasSubstr("[B, C, H, W]"));
}

TEST(TransformsTest, BuilderRejectsBadArguments) {
  struct Case {
    TransformPipeline::Builder builder;
    const char* message;
  };
  std::vector<Case> cases(8);
  cases[0] = {TransformPipeline::Builder().Normalize({}, {}), "Normalize"};
  cases[1] = {TransformPipeline::Builder().Normalize({0.1}, {0.0}),
              "std finite and > 0"};
  cases[2] = {TransformPipeline::Builder().Normalize({0.1, 0.2}, {1.0}),
              "same, non-zero number"};
  cases[3] = {TransformPipeline::Builder().Resize(0, 4), "Resize(0, 4)"};
  cases[4] = {TransformPipeline::Builder().ToFloat().RandomCrop(4, 4, -1),
              "transform 1: RandomCrop(4, 4, padding=-1)"};
  cases[5] = {TransformPipeline::Builder().RandomHorizontalFlip(1.5),
              "p must be in [0, 1]"};
  cases[6] = {TransformPipeline::Builder().Add(nullptr), "Add(nullptr)"};
  cases[7] = {
      TransformPipeline::Builder().Resize(-1, 1).RandomHorizontalFlip(2),
      "transform 0: Resize(-1, 1)"};
  for (const Case& c : cases) {
    absl::StatusOr<TransformPipeline> p = c.builder.Build();
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(p.status().message(), HasSubstr(c.message));
  }
}

}  // namespace
}  // namespace dtrain::data
