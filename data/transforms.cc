#include "data/transforms.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/sub.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/upsample_bilinear2d.h>
#include <ATen/ops/zeros.h>
#include <c10/core/ScalarType.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "base/tensor_text.h"
#include "base/torch_guard.h"
#include "data/random.h"

namespace dtrain::data {
namespace {

std::string ListString(const std::vector<double>& values) {
  return absl::StrCat("[", absl::StrJoin(values, ", "), "]");
}

absl::Status Rejects(const Transform& t, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(t.ToString(), ": ", why));
}

class ToFloatTransform : public Transform {
 public:
  std::string ToString() const override { return "ToFloat"; }
  bool is_random() const override { return false; }

  absl::StatusOr<at::Tensor> Apply(const at::Tensor& batch,
                                   absl::Span<const uint64_t>) const override {
    if (c10::isFloatingType(batch.scalar_type())) return batch;
    if (batch.scalar_type() != at::kByte) {
      return Rejects(*this, absl::StrCat("takes uint8 or floating-point "
                                         "batches, got ",
                                         c10::toString(batch.scalar_type())));
    }
    const at::Tensor in = batch.contiguous();
    at::Tensor out =
        at::empty(in.sizes(), at::TensorOptions().dtype(at::kFloat));
    const uint8_t* src = in.data_ptr<uint8_t>();
    float* dst = out.data_ptr<float>();
    const int64_t n = in.numel();
    const float* table = Table();
    for (int64_t i = 0; i < n; ++i) dst[i] = table[src[i]];
    return out;
  }

 private:
  // v / 255.f for every byte: a division, not a multiplication by 1 / 255,
  // so that results are bit-identical to ToTensor's div(255).
  static const float* Table() {
    static const auto* table = [] {
      auto* t = new std::array<float, 256>;
      for (int v = 0; v < 256; ++v) (*t)[v] = static_cast<float>(v) / 255.f;
      return t;
    }();
    return table->data();
  }
};

class NormalizeTransform : public Transform {
 public:
  NormalizeTransform(std::vector<double> mean, std::vector<double> std)
      : mean_(std::move(mean)), std_(std::move(std)) {}

  std::string ToString() const override {
    return absl::StrCat("Normalize(mean=", ListString(mean_),
                        ", std=", ListString(std_), ")");
  }
  bool is_random() const override { return false; }

  absl::StatusOr<at::Tensor> Apply(const at::Tensor& batch,
                                   absl::Span<const uint64_t>) const override {
    const int64_t channels = batch.size(1);
    const size_t n = mean_.size();
    if (n != 1 && static_cast<int64_t>(n) != channels) {
      return Rejects(*this, absl::StrCat("has ", n,
                                         " values per statistic "
                                         "for a batch with ",
                                         channels, " channels"));
    }
    const at::ScalarType dtype = batch.scalar_type();
    if (dtype != at::kFloat && dtype != at::kDouble) {
      return Rejects(
          *this,
          absl::StrCat("takes float32 or float64 batches, got ",
                       c10::toString(dtype), " (add ToFloat before it)"));
    }
    // As torchvision: subtract, then divide, in the batch's precision
    // (the kernels of Python's sub_ and div_).
    const int64_t c = static_cast<int64_t>(n);
    const at::TensorOptions options = at::TensorOptions().dtype(dtype);
    const at::Tensor mean = at::tensor(mean_, options).reshape({1, c, 1, 1});
    const at::Tensor stdev = at::tensor(std_, options).reshape({1, c, 1, 1});
    return at::sub(batch, mean).div_(stdev);
  }

  // Normalize(ToFloat(bytes)) in one pass through a table per channel, for
  // uint8 batches whose channel count suits: the table holds the very float
  // operations of the two steps (v / 255, then - mean, then / std), so the
  // result is bit-identical, and there is one pass instead of three.
  bool CanFuse(const at::Tensor& bytes) const {
    return bytes.scalar_type() == at::kByte &&
           (mean_.size() == 1 ||
            static_cast<int64_t>(mean_.size()) == bytes.size(1));
  }
  at::Tensor ApplyToBytes(const at::Tensor& bytes) const {
    const at::Tensor in = bytes.contiguous();
    const int64_t b = in.size(0), channels = in.size(1);
    const int64_t plane = in.size(2) * in.size(3);
    std::vector<float> table(channels * 256);
    for (int64_t c = 0; c < channels; ++c) {
      const size_t k = mean_.size() == 1 ? 0 : c;
      const float m = static_cast<float>(mean_[k]);
      const float s = static_cast<float>(std_[k]);
      for (int v = 0; v < 256; ++v) {
        const float x = static_cast<float>(v) / 255.f;
        table[c * 256 + v] = (x - m) / s;
      }
    }
    at::Tensor out =
        at::empty(in.sizes(), at::TensorOptions().dtype(at::kFloat));
    const uint8_t* src = in.data_ptr<uint8_t>();
    float* dst = out.data_ptr<float>();
    for (int64_t i = 0; i < b; ++i) {
      for (int64_t c = 0; c < channels; ++c) {
        const float* t = &table[c * 256];
        const int64_t base = (i * channels + c) * plane;
        for (int64_t j = 0; j < plane; ++j) dst[base + j] = t[src[base + j]];
      }
    }
    return out;
  }

 private:
  std::vector<double> mean_;
  std::vector<double> std_;
};

class ResizeTransform : public Transform {
 public:
  ResizeTransform(int64_t height, int64_t width)
      : height_(height), width_(width) {}

  std::string ToString() const override {
    return absl::StrCat("Resize(", height_, ", ", width_, ")");
  }
  bool is_random() const override { return false; }

  absl::StatusOr<at::Tensor> Apply(const at::Tensor& batch,
                                   absl::Span<const uint64_t>) const override {
    const at::ScalarType dtype = batch.scalar_type();
    if (dtype != at::kByte && dtype != at::kFloat && dtype != at::kDouble) {
      return Rejects(*this,
                     absl::StrCat("takes uint8, float32 or float64 batches, "
                                  "got ",
                                  c10::toString(dtype)));
    }
    if (batch.size(2) == height_ && batch.size(3) == width_) return batch;
    if (batch.size(0) == 0) {
      return at::empty({0, batch.size(1), height_, width_}, batch.options());
    }
    const at::Tensor input =
        dtype == at::kByte ? batch.to(at::kFloat) : batch.contiguous();
    at::Tensor out = at::upsample_bilinear2d(input, {height_, width_},
                                             /*align_corners=*/false);
    if (dtype == at::kByte) {
      // Round half to even (torch.round, as torchvision does), then narrow;
      // one pass. Bilinear weights never leave [0, 255]; the clamp is cheap
      // insurance.
      at::Tensor bytes = at::empty(out.sizes(), batch.options());
      const float* src = out.data_ptr<float>();
      uint8_t* dst = bytes.data_ptr<uint8_t>();
      const int64_t n = out.numel();
      for (int64_t i = 0; i < n; ++i) {
        dst[i] = static_cast<uint8_t>(
            std::clamp(std::nearbyint(src[i]), 0.f, 255.f));
      }
      return bytes;
    }
    return out;
  }

 private:
  int64_t height_;
  int64_t width_;
};

class GrayscaleToRgbTransform : public Transform {
 public:
  std::string ToString() const override { return "GrayscaleToRgb"; }
  bool is_random() const override { return false; }

  absl::StatusOr<at::Tensor> Apply(const at::Tensor& batch,
                                   absl::Span<const uint64_t>) const override {
    if (batch.size(1) != 1) {
      return Rejects(*this, absl::StrCat("takes one-channel batches, got ",
                                         base::ShapeString(batch.sizes())));
    }
    return batch.expand({batch.size(0), 3, batch.size(2), batch.size(3)})
        .contiguous();
  }
};

class RandomCropTransform : public Transform {
 public:
  RandomCropTransform(int64_t height, int64_t width, int64_t padding)
      : height_(height), width_(width), padding_(padding) {}

  std::string ToString() const override {
    return absl::StrCat("RandomCrop(", height_, ", ", width_,
                        ", padding=", padding_, ")");
  }
  bool is_random() const override { return true; }

  absl::StatusOr<at::Tensor> Apply(
      const at::Tensor& batch,
      absl::Span<const uint64_t> seeds) const override {
    const int64_t b = batch.size(0), channels = batch.size(1);
    const int64_t in_h = batch.size(2), in_w = batch.size(3);
    const int64_t padded_h = in_h + 2 * padding_;
    const int64_t padded_w = in_w + 2 * padding_;
    if (height_ > padded_h || width_ > padded_w) {
      return Rejects(*this,
                     absl::StrCat("the window is larger than the padded image ",
                                  padded_h, " x ", padded_w, " of a batch ",
                                  base::ShapeString(batch.sizes())));
    }
    const at::Tensor in = batch.contiguous();
    at::Tensor out = at::zeros({b, channels, height_, width_}, in.options());
    const size_t elem = in.element_size();
    const char* src = static_cast<const char*>(in.data_ptr());
    char* dst = static_cast<char*>(out.data_ptr());
    for (int64_t i = 0; i < b; ++i) {
      internal::SplitMix64 rng(seeds[i]);
      // Window origin in padded coordinates, then in the image's.
      const int64_t top =
          static_cast<int64_t>(rng.Uniform(padded_h - height_ + 1)) - padding_;
      const int64_t left =
          static_cast<int64_t>(rng.Uniform(padded_w - width_ + 1)) - padding_;
      // Output columns [x0, x1) come from the image, the rest are padding.
      const int64_t x0 = std::max<int64_t>(0, -left);
      const int64_t x1 = std::min<int64_t>(width_, in_w - left);
      if (x1 <= x0) continue;
      for (int64_t c = 0; c < channels; ++c) {
        const char* src_plane = src + ((i * channels + c) * in_h * in_w) * elem;
        char* dst_plane = dst + ((i * channels + c) * height_ * width_) * elem;
        for (int64_t y = 0; y < height_; ++y) {
          const int64_t sy = top + y;
          if (sy < 0 || sy >= in_h) continue;
          std::memcpy(dst_plane + (y * width_ + x0) * elem,
                      src_plane + (sy * in_w + left + x0) * elem,
                      (x1 - x0) * elem);
        }
      }
    }
    return out;
  }

 private:
  int64_t height_;
  int64_t width_;
  int64_t padding_;
};

class RandomHorizontalFlipTransform : public Transform {
 public:
  explicit RandomHorizontalFlipTransform(double p) : p_(p) {}

  std::string ToString() const override {
    return absl::StrCat("RandomHorizontalFlip(p=", p_, ")");
  }
  bool is_random() const override { return true; }

  absl::StatusOr<at::Tensor> Apply(
      const at::Tensor& batch,
      absl::Span<const uint64_t> seeds) const override {
    const at::Tensor in = batch.contiguous();
    at::Tensor out = at::empty(in.sizes(), in.options());
    switch (in.element_size()) {
      case 1:
        Run<uint8_t>(in, out, seeds);
        break;
      case 2:
        Run<uint16_t>(in, out, seeds);
        break;
      case 4:
        Run<uint32_t>(in, out, seeds);
        break;
      case 8:
        Run<uint64_t>(in, out, seeds);
        break;
      default:
        return Rejects(*this, absl::StrCat("unsupported dtype ",
                                           c10::toString(in.scalar_type())));
    }
    return out;
  }

 private:
  // Elements are moved as opaque words of their size.
  template <typename Word>
  void Run(const at::Tensor& in, at::Tensor& out,
           absl::Span<const uint64_t> seeds) const {
    const int64_t b = in.size(0);
    const int64_t rows = in.size(1) * in.size(2);
    const int64_t w = in.size(3);
    const Word* src = static_cast<const Word*>(in.data_ptr());
    Word* dst = static_cast<Word*>(out.data_ptr());
    for (int64_t i = 0; i < b; ++i) {
      internal::SplitMix64 rng(seeds[i]);
      const Word* from = src + i * rows * w;
      Word* to = dst + i * rows * w;
      if (!(rng.UniformDouble() < p_)) {
        std::memcpy(to, from, rows * w * sizeof(Word));
        continue;
      }
      for (int64_t r = 0; r < rows; ++r) {
        std::reverse_copy(from + r * w, from + (r + 1) * w, to + r * w);
      }
    }
  }

  double p_;
};

}  // namespace

size_t TransformPipeline::deterministic_prefix_size() const {
  size_t n = 0;
  while (n < transforms_.size() && !transforms_[n]->is_random()) ++n;
  return n;
}

absl::StatusOr<at::Tensor> TransformPipeline::Apply(
    const at::Tensor& batch, absl::Span<const uint64_t> seeds, size_t begin,
    size_t end) const {
  if (!batch.defined() || batch.dim() != 4 || !batch.device().is_cpu()) {
    return absl::InvalidArgumentError(
        absl::StrCat("transforms take [B, C, H, W] batches on the CPU, got ",
                     batch.defined() ? base::ShapeString(batch.sizes())
                                     : "an undefined tensor"));
  }
  if (static_cast<int64_t>(seeds.size()) != batch.size(0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("transforms need one seed per example: ", seeds.size(),
                     " seeds for a batch of ", batch.size(0)));
  }
  end = std::min(end, transforms_.size());
  at::Tensor current = batch;
  std::vector<uint64_t> mixed(seeds.size());
  for (size_t i = begin; i < end; ++i) {
    const Transform& t = *transforms_[i];
    if (t.is_random()) {
      for (size_t j = 0; j < seeds.size(); ++j) {
        mixed[j] = internal::Combine(seeds[j], i);
      }
    }
    absl::StatusOr<at::Tensor> next;
    try {
      const auto* normalize = i + 1 < end
                                  ? dynamic_cast<const NormalizeTransform*>(
                                        transforms_[i + 1].get())
                                  : nullptr;
      if (normalize != nullptr &&
          dynamic_cast<const ToFloatTransform*>(&t) != nullptr &&
          normalize->CanFuse(current)) {
        current = normalize->ApplyToBytes(current);
        ++i;
        continue;
      }
      next = t.Apply(current, mixed);
    } catch (const std::exception& e) {
      next = absl::InvalidArgumentError(absl::StrCat(
          t.ToString(), ": LibTorch failed: ", base::ExceptionMessage(e)));
    }
    if (!next.ok()) {
      return absl::Status(next.status().code(),
                          absl::StrCat("transform ", i, " of [", ToString(),
                                       "]: ", next.status().message()));
    }
    current = *std::move(next);
  }
  return current;
}

std::string TransformPipeline::ToString() const {
  if (transforms_.empty()) return "Identity";
  return absl::StrJoin(transforms_, " -> ",
                       [](std::string* out, const auto& t) {
                         absl::StrAppend(out, t->ToString());
                       });
}

TransformPipeline::Builder& TransformPipeline::Builder::Fail(
    std::string message) {
  if (status_.ok()) {
    status_ = absl::InvalidArgumentError(
        absl::StrCat("transform ", transforms_.size(), ": ", message));
  }
  return *this;
}

TransformPipeline::Builder& TransformPipeline::Builder::ToFloat() {
  return Add(std::make_shared<ToFloatTransform>());
}

TransformPipeline::Builder& TransformPipeline::Builder::Normalize(
    std::vector<double> mean, std::vector<double> std) {
  const std::string call = absl::StrCat("Normalize(mean=", ListString(mean),
                                        ", std=", ListString(std), ")");
  if (mean.empty() || mean.size() != std.size()) {
    return Fail(absl::StrCat(call,
                             ": mean and std need the same, non-zero "
                             "number of values"));
  }
  for (size_t i = 0; i < mean.size(); ++i) {
    if (!std::isfinite(mean[i]) || !std::isfinite(std[i]) || !(std[i] > 0)) {
      return Fail(absl::StrCat(call,
                               ": every mean must be finite and every "
                               "std finite and > 0"));
    }
  }
  return Add(
      std::make_shared<NormalizeTransform>(std::move(mean), std::move(std)));
}

TransformPipeline::Builder& TransformPipeline::Builder::Resize(int64_t height,
                                                               int64_t width) {
  if (height < 1 || width < 1) {
    return Fail(absl::StrCat("Resize(", height, ", ", width,
                             "): the size must be at least 1 x 1"));
  }
  return Add(std::make_shared<ResizeTransform>(height, width));
}

TransformPipeline::Builder& TransformPipeline::Builder::GrayscaleToRgb() {
  return Add(std::make_shared<GrayscaleToRgbTransform>());
}

TransformPipeline::Builder& TransformPipeline::Builder::RandomCrop(
    int64_t height, int64_t width, int64_t padding) {
  if (height < 1 || width < 1 || padding < 0) {
    return Fail(absl::StrCat("RandomCrop(", height, ", ", width,
                             ", padding=", padding,
                             "): the size must be at least 1 x 1 and the "
                             "padding >= 0"));
  }
  return Add(std::make_shared<RandomCropTransform>(height, width, padding));
}

TransformPipeline::Builder& TransformPipeline::Builder::RandomHorizontalFlip(
    double p) {
  if (!(p >= 0 && p <= 1)) {
    return Fail(
        absl::StrCat("RandomHorizontalFlip(p=", p, "): p must be in [0, 1]"));
  }
  return Add(std::make_shared<RandomHorizontalFlipTransform>(p));
}

TransformPipeline::Builder& TransformPipeline::Builder::Add(
    std::shared_ptr<const Transform> transform) {
  if (transform == nullptr) return Fail("Add(nullptr)");
  transforms_.push_back(std::move(transform));
  return *this;
}

absl::StatusOr<TransformPipeline> TransformPipeline::Builder::Build() const {
  DTRAIN_RETURN_IF_ERROR(status_);
  return TransformPipeline(transforms_);
}

}  // namespace dtrain::data
