// Image transforms for the input pipeline, the counterparts of torchvision's
// ToTensor, Normalize, Resize, Grayscale(3), RandomCrop and
// RandomHorizontalFlip. They work on whole batches [B, C, H, W] on the CPU.
//
// Randomness is per example and reproducible: a random transform draws
// example i's choices from seeds[i] only, and the loader derives that seed
// from (loader seed, epoch, the example's slot in the epoch). So an epoch's
// augmented batches are the same whatever the number of loader workers, the
// batch size, or an interruption and resume.
//
// Deterministic transforms at the front of a pipeline can run once over the
// whole dataset ahead of training (the loader does this when the result fits
// its memory budget), so that per batch only the random ones run.
//
// Transforms are immutable and thread-safe; a pipeline can be shared by any
// number of threads.
#ifndef DTRAIN_DATA_TRANSFORMS_H_
#define DTRAIN_DATA_TRANSFORMS_H_

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace dtrain::data {

// Per-channel statistics of the training sets, for Normalize: MNIST's as in
// PyTorch's MNIST example, Fashion-MNIST's computed from its 60,000 training
// images, ImageNet's as torchvision's pretrained models and the ResNet-18
// tutorial use them.
inline constexpr double kMnistMean = 0.1307;
inline constexpr double kMnistStd = 0.3081;
inline constexpr double kFashionMnistMean = 0.2860;
inline constexpr double kFashionMnistStd = 0.3530;
inline constexpr double kImageNetMean[3] = {0.485, 0.456, 0.406};
inline constexpr double kImageNetStd[3] = {0.229, 0.224, 0.225};

class Transform {
 public:
  virtual ~Transform() = default;

  // The transform and its arguments: "Normalize(mean=[0.286], std=[0.353])".
  virtual std::string ToString() const = 0;

  // Whether the output depends on the seeds.
  virtual bool is_random() const = 0;

  // Transforms a batch [B, C, H, W] on the CPU. The input is never modified;
  // the result may be the input itself when there is nothing to do. `seeds`
  // holds one seed per example (seeds.size() == B); deterministic transforms
  // ignore it. kInvalidArgument, naming the
  // transform, when the batch's dtype or shape does not suit it.
  virtual absl::StatusOr<at::Tensor> Apply(
      const at::Tensor& batch, absl::Span<const uint64_t> seeds) const = 0;
};

// A sequence of transforms applied in order. The default pipeline is the
// identity. Cheap to copy (the transforms are shared).
class TransformPipeline {
 public:
  class Builder;

  static constexpr size_t kEnd = std::numeric_limits<size_t>::max();

  TransformPipeline() = default;

  size_t size() const { return transforms_.size(); }
  bool empty() const { return transforms_.empty(); }
  const Transform& transform(size_t i) const { return *transforms_.at(i); }

  // How many transforms at the front are deterministic.
  size_t deterministic_prefix_size() const;

  // Applies transforms [begin, min(end, size())) to a batch [B, C, H, W] on
  // the CPU, with one seed per example. Transform i draws from the example
  // seeds combined with i, so running [0, k) then [k, n) gives exactly what
  // [0, n) gives. Errors: kInvalidArgument for a batch that is not 4-D on the
  // CPU, a seed count other than B, or a transform that rejects its input
  // (with the failing transform's name and position).
  absl::StatusOr<at::Tensor> Apply(const at::Tensor& batch,
                                   absl::Span<const uint64_t> seeds,
                                   size_t begin = 0, size_t end = kEnd) const;

  // "ToFloat -> Normalize(mean=[0.286], std=[0.353])", or "Identity".
  std::string ToString() const;

 private:
  explicit TransformPipeline(
      std::vector<std::shared_ptr<const Transform>> transforms)
      : transforms_(std::move(transforms)) {}

  std::vector<std::shared_ptr<const Transform>> transforms_;
};

// Builds a pipeline; invalid arguments are reported by Build, which names the
// first bad transform:
//
//   absl::StatusOr<TransformPipeline> pipeline =
//       TransformPipeline::Builder()
//           .ToFloat()
//           .Normalize({kFashionMnistMean}, {kFashionMnistStd})
//           .RandomCrop(28, 28, /*padding=*/2)
//           .RandomHorizontalFlip()
//           .Build();
class TransformPipeline::Builder {
 public:
  // uint8 [0, 255] -> float32 [0, 1], dividing by 255 as ToTensor does.
  // Floating-point batches pass unchanged; other dtypes are an error.
  Builder& ToFloat();

  // (x - mean[c]) / std[c] per channel c, on floating-point batches. `mean`
  // and `std` have one value per channel, or one value for all channels;
  // every std must be > 0. Right after ToFloat on a uint8 batch, the two run
  // fused in one pass, with bit-identical results.
  Builder& Normalize(std::vector<double> mean, std::vector<double> std);

  // Bilinear resize to height x width with half-pixel centres
  // (align_corners=False, no antialiasing), as torch.nn.functional.interpolate
  // and torchvision's tensor Resize(antialias=False). uint8 batches stay
  // uint8 (rounded half to even, as torchvision rounds), so resized images
  // can be kept compactly.
  Builder& Resize(int64_t height, int64_t width);

  // One channel -> three identical channels (grayscale images into a model
  // built for RGB). Any dtype.
  Builder& GrayscaleToRgb();

  // Pads each side with `padding` zeros, then cuts a height x width window
  // at a uniformly random position, per example. Any dtype.
  Builder& RandomCrop(int64_t height, int64_t width, int64_t padding = 0);

  // Mirrors each example left-right with probability p. Any dtype of 1, 2, 4
  // or 8 bytes.
  Builder& RandomHorizontalFlip(double p = 0.5);

  // A transform of one's own. Must not be null.
  Builder& Add(std::shared_ptr<const Transform> transform);

  // kInvalidArgument naming the first transform given invalid arguments.
  absl::StatusOr<TransformPipeline> Build() const;

 private:
  Builder& Fail(std::string message);

  std::vector<std::shared_ptr<const Transform>> transforms_;
  absl::Status status_;
};

}  // namespace dtrain::data

#endif  // DTRAIN_DATA_TRANSFORMS_H_
