// Per-example transforms for readers of variable-size images (ImageFolder):
// one decoded RGB image in, a fixed-size 3 x H x W uint8 example out, so that
// examples can then be stacked into a batch for the batch transforms of
// transforms.h (flip, ToFloat, Normalize). The counterparts of torchvision's
// RandomResizedCrop(size) (training) and Resize(resize) + CenterCrop(size)
// (validation), with PIL's bilinear resampling (image_resample.h).
//
// torchvision's algorithms and distributions, drawn from random.h's generator
// rather than torch's: the crops differ from torchvision's for the same seed.
//
// Randomness: a random transform draws only from the seed it is given; the
// ImageFolder reader derives that seed from the loader's per-example seed,
// so the crops of an epoch are the same for any number of loader workers and
// after a resume.
//
// Transforms are immutable and thread-safe.
#ifndef DTRAIN_DATA_IMAGE_TRANSFORMS_H_
#define DTRAIN_DATA_IMAGE_TRANSFORMS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/image_decoder.h"
#include "data/random.h"

namespace dtrain::data {

class ImageTransform {
 public:
  virtual ~ImageTransform() = default;

  // "RandomResizedCrop(224, scale=(0.08, 1), ratio=(0.75, 1.33333))".
  virtual std::string ToString() const = 0;
  virtual bool is_random() const = 0;
  // The size of every output.
  virtual int64_t height() const = 0;
  virtual int64_t width() const = 0;

  // Transforms `image` (at least 1 x 1) into `out`: three planes (R, G, B)
  // of height() x width() bytes. Deterministic transforms ignore `seed`.
  virtual absl::Status Apply(const RgbImage& image, uint64_t seed,
                             uint8_t* out) const = 0;
};

// torchvision's RandomResizedCrop(size, scale, ratio): a crop of a random
// area (scale of the image's area) and aspect ratio (drawn log-uniformly),
// ten attempts at fitting one inside the image, else the central crop of the
// image clamped to the ratio range; then resized to size x size.
// kInvalidArgument unless size >= 1, 0 < scale_min <= scale_max and
// 0 < ratio_min <= ratio_max.
absl::StatusOr<std::shared_ptr<const ImageTransform>> RandomResizedCrop(
    int64_t size, double scale_min = 0.08, double scale_max = 1.0,
    double ratio_min = 3.0 / 4.0, double ratio_max = 4.0 / 3.0);

// torchvision's Resize(resize) (the shorter side to `resize`, the longer one
// scaled and truncated as torchvision does) then CenterCrop(crop).
// kInvalidArgument unless 1 <= crop <= resize.
absl::StatusOr<std::shared_ptr<const ImageTransform>> ResizeCenterCrop(
    int64_t resize, int64_t crop);

namespace internal {

struct CropBox {
  int64_t top = 0;
  int64_t left = 0;
  int64_t height = 0;
  int64_t width = 0;
};

// RandomResizedCrop.get_params: the crop of a height x width image, drawing
// from `rng` (up to 10 attempts, each two draws, then two for the position).
CropBox RandomResizedCropBox(int64_t height, int64_t width, double scale_min,
                             double scale_max, double ratio_min,
                             double ratio_max, SplitMix64& rng);

}  // namespace internal

}  // namespace dtrain::data

#endif  // DTRAIN_DATA_IMAGE_TRANSFORMS_H_
