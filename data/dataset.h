// The in-memory labelled image dataset every reader returns and the loader
// consumes: examples decoded once into one contiguous tensor, labels into
// another. Datasets that fit in memory (MNIST, Fashion-MNIST, STL-10's labelled
// splits) never touch the disk again after loading.
//
// A Dataset is the in-memory ExampleSource the loader gathers from (Gather is
// one index_select). It is immutable and cheap to copy (the tensors are
// reference counted); any number of threads may read one concurrently.
#ifndef DTRAIN_DATA_DATASET_H_
#define DTRAIN_DATA_DATASET_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "data/example_source.h"

namespace dtrain::data {

// Which part of a dataset to load.
enum class Split { kTrain, kTest };

// "train" or "test".
absl::string_view SplitName(Split split);

class Dataset final : public ExampleSource {
 public:
  // Checks and wraps the tensors of a dataset of N examples:
  // - images: [N, C, H, W] on the CPU, C, H, W >= 1, any dtype (uint8 for
  //   decoded images, float32 after transforms);
  // - labels: [N], any integer dtype, each in [0, num_classes); stored as
  //   int64, what the loss functions take.
  // Both are made contiguous (copied only if they are not). N may be 0.
  // kInvalidArgument naming `name` and the offending value otherwise.
  static absl::StatusOr<Dataset> Create(std::string name, at::Tensor images,
                                        at::Tensor labels, int64_t num_classes);

  // For messages and logs: "fashion-mnist train", "synthetic".
  const std::string& name() const override { return name_; }
  int64_t size() const override { return labels_.size(0); }
  int64_t num_classes() const override { return num_classes_; }
  // [N, C, H, W], contiguous.
  const at::Tensor& images() const { return images_; }
  // [N] int64, contiguous.
  const at::Tensor& labels() const { return labels_; }
  // {C, H, W}.
  std::vector<int64_t> example_shape() const override;

  // The examples at `indices` (index_select of images and labels); the seeds
  // are not used, but their count must match. Errors as ExampleSource says.
  absl::StatusOr<Examples> Gather(
      absl::Span<const int64_t> indices,
      absl::Span<const uint64_t> seeds) const override;

  // Examples [begin, end) as a dataset sharing this one's memory, e.g. to
  // train on the first 1,000 examples. kInvalidArgument unless
  // 0 <= begin <= end <= size().
  absl::StatusOr<Dataset> Slice(int64_t begin, int64_t end) const;

  // "fashion-mnist train: 60000 x [1, 28, 28] Byte, 10 classes".
  std::string DebugString() const override;

  const Dataset* AsDataset() const override { return this; }

 private:
  Dataset(std::string name, at::Tensor images, at::Tensor labels,
          int64_t num_classes);

  std::string name_;
  at::Tensor images_;
  at::Tensor labels_;
  int64_t num_classes_;
};

}  // namespace dtrain::data

#endif  // DTRAIN_DATA_DATASET_H_
