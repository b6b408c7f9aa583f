#include "data/image_transforms.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "data/image_resample.h"

namespace dtrain::data {
namespace {

// Python's round(): to the nearest integer, halves to even.
int64_t RoundHalfEven(double x) {
  return static_cast<int64_t>(std::nearbyint(x));
}

absl::Status CheckImage(const ImageTransform& t, const RgbImage& image) {
  if (image.height < 1 || image.width < 1 ||
      static_cast<int64_t>(image.pixels.size()) !=
          image.height * image.width * 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        t.ToString(), ": needs an RGB image of at least 1 x 1, got ",
        image.width, " x ", image.height, " with ", image.pixels.size(),
        " bytes"));
  }
  return absl::OkStatus();
}

internal::RgbView Crop(const RgbImage& image, const internal::CropBox& box) {
  return {image.pixels.data() + (box.top * image.width + box.left) * 3,
          box.height, box.width, image.width * 3};
}

class RandomResizedCropTransform : public ImageTransform {
 public:
  RandomResizedCropTransform(int64_t size, double scale_min, double scale_max,
                             double ratio_min, double ratio_max)
      : size_(size),
        scale_min_(scale_min),
        scale_max_(scale_max),
        ratio_min_(ratio_min),
        ratio_max_(ratio_max) {}

  std::string ToString() const override {
    return absl::StrCat("RandomResizedCrop(", size_, ", scale=(", scale_min_,
                        ", ", scale_max_, "), ratio=(", ratio_min_, ", ",
                        ratio_max_, "))");
  }
  bool is_random() const override { return true; }
  int64_t height() const override { return size_; }
  int64_t width() const override { return size_; }

  absl::Status Apply(const RgbImage& image, uint64_t seed,
                     uint8_t* out) const override {
    DTRAIN_RETURN_IF_ERROR(CheckImage(*this, image));
    internal::SplitMix64 rng(seed);
    const internal::CropBox box =
        internal::RandomResizedCropBox(image.height, image.width, scale_min_,
                                       scale_max_, ratio_min_, ratio_max_, rng);
    internal::ResizeBilinearWindow(Crop(image, box), size_, size_, 0, 0, size_,
                                   size_, out);
    return absl::OkStatus();
  }

 private:
  int64_t size_;
  double scale_min_, scale_max_, ratio_min_, ratio_max_;
};

class ResizeCenterCropTransform : public ImageTransform {
 public:
  ResizeCenterCropTransform(int64_t resize, int64_t crop)
      : resize_(resize), crop_(crop) {}

  std::string ToString() const override {
    return absl::StrCat("Resize(", resize_, ") -> CenterCrop(", crop_, ")");
  }
  bool is_random() const override { return false; }
  int64_t height() const override { return crop_; }
  int64_t width() const override { return crop_; }

  absl::Status Apply(const RgbImage& image, uint64_t,
                     uint8_t* out) const override {
    DTRAIN_RETURN_IF_ERROR(CheckImage(*this, image));
    // torchvision's _compute_resized_output_size: the longer side is
    // truncated, not rounded.
    int64_t h = resize_, w = resize_;
    if (image.width <= image.height) {
      h = resize_ * image.height / image.width;
    } else {
      w = resize_ * image.width / image.height;
    }
    // CenterCrop: int(round((size - crop) / 2.0)).
    const int64_t top = RoundHalfEven((h - crop_) / 2.0);
    const int64_t left = RoundHalfEven((w - crop_) / 2.0);
    internal::ResizeBilinearWindow(
        {image.pixels.data(), image.height, image.width, image.width * 3}, h, w,
        top, left, crop_, crop_, out);
    return absl::OkStatus();
  }

 private:
  int64_t resize_;
  int64_t crop_;
};

}  // namespace

namespace internal {

CropBox RandomResizedCropBox(int64_t height, int64_t width, double scale_min,
                             double scale_max, double ratio_min,
                             double ratio_max, SplitMix64& rng) {
  const double area = static_cast<double>(height) * width;
  const double log_min = std::log(ratio_min), log_max = std::log(ratio_max);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target =
        area * (scale_min + rng.UniformDouble() * (scale_max - scale_min));
    const double ratio =
        std::exp(log_min + rng.UniformDouble() * (log_max - log_min));
    const int64_t w = RoundHalfEven(std::sqrt(target * ratio));
    const int64_t h = RoundHalfEven(std::sqrt(target / ratio));
    if (0 < w && w <= width && 0 < h && h <= height) {
      const auto top = static_cast<int64_t>(rng.Uniform(height - h + 1));
      const auto left = static_cast<int64_t>(rng.Uniform(width - w + 1));
      return {top, left, h, w};
    }
  }
  // The central crop, its ratio clamped to [ratio_min, ratio_max].
  const double in_ratio = static_cast<double>(width) / height;
  int64_t w = width, h = height;
  if (in_ratio < ratio_min) {
    h = RoundHalfEven(w / ratio_min);
  } else if (in_ratio > ratio_max) {
    w = RoundHalfEven(h * ratio_max);
  }
  // Rounding never leaves the image in torchvision's arithmetic; one more
  // clamp keeps every crop inside it even for extreme arguments.
  h = std::clamp<int64_t>(h, 1, height);
  w = std::clamp<int64_t>(w, 1, width);
  return {(height - h) / 2, (width - w) / 2, h, w};
}

}  // namespace internal

absl::StatusOr<std::shared_ptr<const ImageTransform>> RandomResizedCrop(
    int64_t size, double scale_min, double scale_max, double ratio_min,
    double ratio_max) {
  if (size < 1 || !(scale_min > 0) || !(scale_min <= scale_max) ||
      !std::isfinite(scale_max) || !(ratio_min > 0) ||
      !(ratio_min <= ratio_max) || !std::isfinite(ratio_max)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RandomResizedCrop(", size, ", scale=(", scale_min, ", ", scale_max,
        "), ratio=(", ratio_min, ", ", ratio_max,
        ")): needs size >= 1, 0 < scale_min <= scale_max and 0 < ratio_min "
        "<= ratio_max, all finite"));
  }
  return std::shared_ptr<const ImageTransform>(
      std::make_shared<RandomResizedCropTransform>(size, scale_min, scale_max,
                                                   ratio_min, ratio_max));
}

absl::StatusOr<std::shared_ptr<const ImageTransform>> ResizeCenterCrop(
    int64_t resize, int64_t crop) {
  if (crop < 1 || crop > resize) {
    return absl::InvalidArgumentError(
        absl::StrCat("Resize(", resize, ") -> CenterCrop(", crop,
                     "): needs 1 <= crop <= resize"));
  }
  return std::shared_ptr<const ImageTransform>(
      std::make_shared<ResizeCenterCropTransform>(resize, crop));
}

}  // namespace dtrain::data
