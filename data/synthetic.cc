#include "data/synthetic.h"

#include <ATen/ops/empty.h>

#include <algorithm>
#include <exception>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/torch_guard.h"
#include "data/random.h"

namespace dtrain::data {
namespace {

constexpr int64_t kMaxBytes = int64_t{1} << 40;

}  // namespace

absl::StatusOr<Dataset> MakeSyntheticDataset(const SyntheticOptions& o) {
  auto invalid = [](auto&&... parts) {
    return absl::InvalidArgumentError(
        absl::StrCat("synthetic dataset: ", parts...));
  };
  if (o.size < 0) return invalid("size must be >= 0, got ", o.size);
  if (o.channels < 1 || o.height < 1 || o.width < 1) {
    return invalid("channels, height and width must be >= 1, got ", o.channels,
                   " x ", o.height, " x ", o.width);
  }
  if (o.num_classes < 1) {
    return invalid("num_classes must be >= 1, got ", o.num_classes);
  }
  if (o.noise < 0 || o.noise > 255) {
    return invalid("noise must be in 0..255, got ", o.noise);
  }
  int64_t example = 0;
  int64_t total = 0;
  if (__builtin_mul_overflow(o.channels, o.height, &example) ||
      __builtin_mul_overflow(example, o.width, &example) ||
      __builtin_mul_overflow(example, std::max(o.size, o.num_classes),
                             &total) ||
      total > kMaxBytes) {
    return invalid(o.size, " examples of ", o.channels, " x ", o.height, " x ",
                   o.width, " (and ", o.num_classes,
                   " class patterns) exceed 2^40 bytes");
  }

  at::Tensor images;
  at::Tensor labels;
  DTRAIN_RETURN_IF_ERROR(base::GuardTorch(
      absl::StatusCode::kResourceExhausted,
      "synthetic dataset: cannot allocate: ", [&] {
        images = at::empty({o.size, o.channels, o.height, o.width},
                           at::TensorOptions().dtype(at::kByte));
        labels = at::empty({o.size}, at::TensorOptions().dtype(at::kLong));
        return absl::OkStatus();
      }));

  // Class patterns from one stream, then each example from its own stream,
  // so that example i does not depend on how many examples come before it.
  std::vector<uint8_t> patterns(o.num_classes * example);
  internal::SplitMix64 pattern_rng(internal::Combine(o.seed, 0));
  for (uint8_t& p : patterns) p = static_cast<uint8_t>(pattern_rng.Next());

  uint8_t* pixels = images.data_ptr<uint8_t>();
  int64_t* label = labels.data_ptr<int64_t>();
  const int span = 2 * o.noise + 1;
  for (int64_t i = 0; i < o.size; ++i) {
    internal::SplitMix64 rng(
        internal::Combine(internal::Combine(o.seed, 1), i));
    label[i] = static_cast<int64_t>(rng.Uniform(o.num_classes));
    const uint8_t* pattern = &patterns[label[i] * example];
    uint8_t* out = pixels + i * example;
    uint64_t bits = 0;
    int left = 0;
    for (int64_t j = 0; j < example; ++j) {
      // 16 random bits per pixel, four pixels per draw.
      if (left == 0) {
        bits = rng.Next();
        left = 4;
      }
      const int noise =
          static_cast<int>(((bits & 0xffff) * span) >> 16) - o.noise;
      bits >>= 16;
      --left;
      out[j] = static_cast<uint8_t>(std::clamp(pattern[j] + noise, 0, 255));
    }
  }
  return Dataset::Create(absl::StrCat("synthetic(seed=", o.seed, ")"),
                         std::move(images), std::move(labels), o.num_classes);
}

}  // namespace dtrain::data
