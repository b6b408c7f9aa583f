#include "data/image_transforms.h"

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <set>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "data/image_resample.h"
#include "data/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::data {
namespace {

using internal::CropBox;
using internal::RandomResizedCropBox;
using internal::ResizeBilinearWindow;
using internal::RgbView;
using internal::SplitMix64;

RgbImage Image(int64_t h, int64_t w, uint64_t seed) {
  RgbImage image{h, w, std::vector<uint8_t>(h * w * 3)};
  SplitMix64 rng(seed);
  for (uint8_t& v : image.pixels) v = static_cast<uint8_t>(rng.Next());
  return image;
}

RgbView View(const RgbImage& image) {
  return {image.pixels.data(), image.height, image.width, image.width * 3};
}

// torch.ops.aten._upsample_bilinear2d_aa (PyTorch 1.13, torchvision's
// antialiased resize, made to match PIL) of a 9 x 13 image whose sample
// (c, y, x) is (29 y + 13 x + 71 c) mod 256, to 4 x 5, rounded. PIL rounds
// between its two passes, so a difference of 1 is allowed.
constexpr uint8_t kTorchAa4x5[] = {
    38,  68,  102, 136, 166, 97,  126, 161, 190, 179, 163, 190, 189, 115, 58,
    193, 143, 74,  64,  94,  109, 139, 173, 196, 156, 168, 195, 178, 99,  58,
    167, 128, 66,  77,  106, 52,  67,  101, 135, 165, 180, 202, 163, 66,  52,
    169, 112, 65,  81,  111, 55,  80,  113, 148, 177, 108, 138, 172, 203, 170};

TEST(ResizeBilinearTest, MatchesPyTorchsAntialiasedResizeWithinOne) {
  RgbImage image{9, 13, {}};
  for (int y = 0; y < 9; ++y) {
    for (int x = 0; x < 13; ++x) {
      for (int c = 0; c < 3; ++c) {
        image.pixels.push_back(
            static_cast<uint8_t>((29 * y + 13 * x + 71 * c) % 256));
      }
    }
  }
  std::vector<uint8_t> out(3 * 4 * 5);
  ResizeBilinearWindow(View(image), 4, 5, 0, 0, 4, 5, out.data());
  for (size_t i = 0; i < out.size(); ++i) {
    EXPECT_LE(std::abs(int{out[i]} - int{kTorchAa4x5[i]}), 1) << "sample " << i;
  }
}

TEST(ResizeBilinearTest, SameSizeIsTheIdentityAndConstantsStayConstant) {
  const RgbImage image = Image(11, 17, 1);
  std::vector<uint8_t> out(3 * 11 * 17);
  ResizeBilinearWindow(View(image), 11, 17, 0, 0, 11, 17, out.data());
  for (int64_t i = 0; i < 11 * 17; ++i) {
    for (int c = 0; c < 3; ++c) {
      ASSERT_EQ(out[c * 11 * 17 + i], image.pixels[3 * i + c]);
    }
  }
  const RgbImage flat{37, 23, std::vector<uint8_t>(37 * 23 * 3, 201)};
  for (auto [h, w] : {std::pair<int, int>{5, 3}, {100, 7}, {1, 1}, {64, 64}}) {
    std::vector<uint8_t> resized(3 * h * w);
    ResizeBilinearWindow(View(flat), h, w, 0, 0, h, w, resized.data());
    EXPECT_THAT(resized, ::testing::Each(201)) << h << " x " << w;
  }
}

TEST(ResizeCenterCropTest, EqualsAWholeResizeThenACentreCrop) {
  // torchvision: Resize(256) of 500 x 375 (w x h) is 341 x 256; CenterCrop
  // (224) starts at top round(16) = 16, left round(58.5) = 58.
  const RgbImage image = Image(375, 500, 2);
  std::vector<uint8_t> whole(3 * 256 * 341);
  ResizeBilinearWindow(View(image), 256, 341, 0, 0, 256, 341, whole.data());
  std::shared_ptr<const ImageTransform> t = *ResizeCenterCrop(256, 224);
  EXPECT_FALSE(t->is_random());
  EXPECT_EQ(t->height(), 224);
  std::vector<uint8_t> out(3 * 224 * 224);
  ASSERT_TRUE(t->Apply(image, 0, out.data()).ok());
  for (int c = 0; c < 3; ++c) {
    for (int y = 0; y < 224; ++y) {
      for (int x = 0; x < 224; ++x) {
        ASSERT_EQ(out[(c * 224 + y) * 224 + x],
                  whole[(c * 256 + y + 16) * 341 + x + 58])
            << c << " " << y << " " << x;
      }
    }
  }
}

TEST(ResizeCenterCropTest, ExtremeShapesWork) {
  std::shared_ptr<const ImageTransform> t = *ResizeCenterCrop(8, 7);
  std::vector<uint8_t> out(3 * 7 * 7);
  for (auto [h, w] : {std::pair<int, int>{1, 1}, {1, 3000}, {3000, 1}}) {
    EXPECT_TRUE(t->Apply(Image(h, w, 3), 0, out.data()).ok());
  }
  EXPECT_FALSE(ResizeCenterCrop(7, 8).ok());
  EXPECT_FALSE(ResizeCenterCrop(7, 0).ok());
}

TEST(RandomResizedCropTest, BoxesStayInsideTheImageAndFollowTheSeed) {
  std::set<std::tuple<int64_t, int64_t, int64_t, int64_t>> distinct;
  for (auto [h, w] : {std::pair<int64_t, int64_t>{1, 1},
                      {375, 500},
                      {1, 400},
                      {400, 1},
                      {7, 3},
                      {224, 224}}) {
    for (uint64_t seed = 0; seed < 300; ++seed) {
      SplitMix64 rng(seed), again(seed);
      const CropBox box =
          RandomResizedCropBox(h, w, 0.08, 1.0, 3.0 / 4, 4.0 / 3, rng);
      ASSERT_GE(box.top, 0);
      ASSERT_GE(box.left, 0);
      ASSERT_GE(box.height, 1);
      ASSERT_GE(box.width, 1);
      ASSERT_LE(box.top + box.height, h) << h << " x " << w << " seed " << seed;
      ASSERT_LE(box.left + box.width, w) << h << " x " << w << " seed " << seed;
      const CropBox same =
          RandomResizedCropBox(h, w, 0.08, 1.0, 3.0 / 4, 4.0 / 3, again);
      ASSERT_EQ(std::tie(box.top, box.left, box.height, box.width),
                std::tie(same.top, same.left, same.height, same.width));
      if (h == 375) distinct.emplace(box.top, box.left, box.height, box.width);
      if (h == 375) {
        // Within the ratio and area ranges, up to rounding.
        const double ratio = static_cast<double>(box.width) / box.height;
        EXPECT_GE(ratio, 0.75 * 0.98);
        EXPECT_LE(ratio, 4.0 / 3 * 1.02);
        EXPECT_GE(box.width * box.height, 0.08 * 375 * 500 * 0.97);
      }
    }
  }
  EXPECT_GT(distinct.size(), 290u);
}

TEST(RandomResizedCropTest, FallsBackToTheRatioClampedCentralCrop) {
  // Area 1e5 at scale 1: any ratio in [3/4, 4/3] is taller than 100, so all
  // ten attempts fail; the fallback is 100 x round(133.33) in the middle.
  SplitMix64 rng(1);
  const CropBox box =
      RandomResizedCropBox(100, 1000, 1.0, 1.0, 3.0 / 4, 4.0 / 3, rng);
  EXPECT_EQ(box.top, 0);
  EXPECT_EQ(box.height, 100);
  EXPECT_EQ(box.width, 133);
  EXPECT_EQ(box.left, (1000 - 133) / 2);
  const CropBox tall =
      RandomResizedCropBox(1000, 100, 1.0, 1.0, 3.0 / 4, 4.0 / 3, rng);
  EXPECT_EQ(tall.width, 100);
  EXPECT_EQ(tall.height, 133);
  EXPECT_EQ(tall.top, (1000 - 133) / 2);
}

TEST(RandomResizedCropTest, OutputIsFixedSizeAndDeterministicPerSeed) {
  std::shared_ptr<const ImageTransform> t = *RandomResizedCrop(32);
  EXPECT_TRUE(t->is_random());
  EXPECT_EQ(t->width(), 32);
  const RgbImage image = Image(75, 100, 4);
  std::vector<uint8_t> a(3 * 32 * 32), b(a.size()), c(a.size());
  ASSERT_TRUE(t->Apply(image, 11, a.data()).ok());
  ASSERT_TRUE(t->Apply(image, 11, b.data()).ok());
  ASSERT_TRUE(t->Apply(image, 12, c.data()).ok());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  // The output is the crop of the seed's box, resized.
  SplitMix64 rng(11);
  const CropBox box =
      RandomResizedCropBox(75, 100, 0.08, 1.0, 3.0 / 4, 4.0 / 3, rng);
  std::vector<uint8_t> expected(a.size());
  ResizeBilinearWindow({image.pixels.data() + (box.top * 100 + box.left) * 3,
                        box.height, box.width, 300},
                       32, 32, 0, 0, 32, 32, expected.data());
  EXPECT_EQ(a, expected);
}

TEST(ImageTransformTest, BadArgumentsAndImagesAreErrors) {
  EXPECT_FALSE(RandomResizedCrop(0).ok());
  EXPECT_FALSE(RandomResizedCrop(8, 0, 1).ok());
  EXPECT_FALSE(RandomResizedCrop(8, 0.5, 0.4).ok());
  EXPECT_FALSE(RandomResizedCrop(8, 0.1, 1, 2, 1).ok());
  std::shared_ptr<const ImageTransform> t = *RandomResizedCrop(8);
  std::vector<uint8_t> out(3 * 8 * 8);
  const RgbImage empty;
  EXPECT_EQ(t->Apply(empty, 0, out.data()).code(),
            absl::StatusCode::kInvalidArgument);
  const RgbImage short_data{4, 4, std::vector<uint8_t>(10)};
  EXPECT_FALSE(t->Apply(short_data, 0, out.data()).ok());
}

}  // namespace
}  // namespace dtrain::data
