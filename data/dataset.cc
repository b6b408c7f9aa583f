#include "data/dataset.h"

#include <ATen/ops/_to_copy.h>
#include <ATen/ops/aminmax.h>
#include <ATen/ops/argmax.h>
#include <ATen/ops/argmin.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/index_select.h>
#include <c10/core/ScalarType.h>

#include <cstring>
#include <exception>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/tensor_text.h"
#include "base/torch_guard.h"

namespace dtrain::data {

absl::string_view SplitName(Split split) {
  switch (split) {
    case Split::kTrain:
      return "train";
    case Split::kTest:
      return "test";
  }
  return "unknown";
}

Dataset::Dataset(std::string name, at::Tensor images, at::Tensor labels,
                 int64_t num_classes)
    : name_(std::move(name)),
      images_(std::move(images)),
      labels_(std::move(labels)),
      num_classes_(num_classes) {}

absl::StatusOr<Dataset> Dataset::Create(std::string name, at::Tensor images,
                                        at::Tensor labels,
                                        int64_t num_classes) {
  auto invalid = [&name](auto&&... parts) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset '", name, "': ", parts...));
  };
  if (!images.defined() || !labels.defined()) {
    return invalid("images and labels must both be defined tensors");
  }
  if (!images.device().is_cpu() || !labels.device().is_cpu()) {
    return invalid("images and labels must be on the CPU");
  }
  if (images.dim() != 4) {
    return invalid("images must be [N, C, H, W], got shape ",
                   base::ShapeString(images.sizes()));
  }
  for (int d = 1; d < 4; ++d) {
    if (images.size(d) < 1) {
      return invalid("images must be [N, C, H, W] with C, H, W >= 1, got ",
                     base::ShapeString(images.sizes()));
    }
  }
  if (labels.dim() != 1) {
    return invalid("labels must be one-dimensional, got shape ",
                   base::ShapeString(labels.sizes()));
  }
  if (labels.size(0) != images.size(0)) {
    return invalid(images.size(0), " images but ", labels.size(0), " labels");
  }
  if (!c10::isIntegralType(labels.scalar_type(), /*includeBool=*/false)) {
    return invalid("labels must have an integer dtype, got ",
                   c10::toString(labels.scalar_type()));
  }
  if (num_classes < 1) {
    return invalid("num_classes must be >= 1, got ", num_classes);
  }
  try {
    at::Tensor long_labels = labels.to(at::kLong).contiguous();
    if (long_labels.numel() > 0) {
      auto [min, max] = at::aminmax(long_labels);
      if (min.item<int64_t>() < 0 || max.item<int64_t>() >= num_classes) {
        const bool low = min.item<int64_t>() < 0;
        const int64_t at_index =
            (low ? at::argmin(long_labels) : at::argmax(long_labels))
                .item<int64_t>();
        return invalid("label ", long_labels[at_index].item<int64_t>(),
                       " of example ", at_index, " is outside [0, ",
                       num_classes, ")");
      }
    }
    return Dataset(std::move(name), images.contiguous(), std::move(long_labels),
                   num_classes);
  } catch (const std::exception& e) {
    return invalid("LibTorch failed: ", base::ExceptionMessage(e));
  }
}

std::vector<int64_t> Dataset::example_shape() const {
  return {images_.size(1), images_.size(2), images_.size(3)};
}

absl::StatusOr<Dataset> Dataset::Slice(int64_t begin, int64_t end) const {
  if (begin < 0 || begin > end || end > size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset '", name_, "': slice [", begin, ", ", end,
                     ") is not within [0, ", size(), "]"));
  }
  return Dataset(absl::StrCat(name_, "[", begin, ":", end, "]"),
                 images_.slice(0, begin, end), labels_.slice(0, begin, end),
                 num_classes_);
}

absl::StatusOr<Examples> Dataset::Gather(
    absl::Span<const int64_t> indices, absl::Span<const uint64_t> seeds) const {
  if (seeds.size() != indices.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset '", name_, "': ", seeds.size(), " seeds for ",
                     indices.size(), " examples"));
  }
  for (size_t i = 0; i < indices.size(); ++i) {
    if (indices[i] < 0 || indices[i] >= size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("dataset '", name_, "': index ", indices[i],
                       " is outside [0, ", size(), ")"));
    }
  }
  return base::GuardTorch(
      absl::StatusCode::kInternal,
      absl::StrCat("dataset '", name_, "': gathering failed: "),
      [&]() -> absl::StatusOr<Examples> {
        const auto count = static_cast<int64_t>(indices.size());
        at::Tensor index =
            at::empty({count}, at::TensorOptions().dtype(at::kLong));
        std::memcpy(index.data_ptr<int64_t>(), indices.data(),
                    count * sizeof(int64_t));
        return Examples{at::index_select(images_, 0, index),
                        at::index_select(labels_, 0, index)};
      });
}

std::string Dataset::DebugString() const {
  return absl::StrCat(name_, ": ", size(), " x ",
                      base::ShapeString(images_.sizes().slice(1)), " ",
                      c10::toString(images_.scalar_type()), ", ", num_classes_,
                      " classes");
}

}  // namespace dtrain::data
