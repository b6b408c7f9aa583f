// ExampleSource: what the DataLoader gathers batches from. A source knows how
// many labelled examples it has and produces any subset of them as one batch
// of equally shaped examples. The in-memory Dataset is one (its examples are
// already decoded); ImageFolder is another (each Gather reads and decodes
// image files, then brings them to one size).
//
// Thread safety: Gather is called by the loader's worker threads
// concurrently; implementations must allow that (be immutable after
// construction, or lock). A source must outlive the loaders that use it (the
// loader holds a shared_ptr).
#ifndef DTRAIN_DATA_EXAMPLE_SOURCE_H_
#define DTRAIN_DATA_EXAMPLE_SOURCE_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace dtrain::data {

class Dataset;

// A batch as a source produces it, before the batch transforms.
struct Examples {
  // [B, C, H, W] on the CPU, {C, H, W} = example_shape().
  at::Tensor images;
  // [B] int64, each in [0, num_classes()).
  at::Tensor labels;
};

class ExampleSource {
 public:
  virtual ~ExampleSource() = default;

  // For messages and logs: "fashion-mnist train", "imagefolder /data/train".
  virtual const std::string& name() const = 0;
  virtual int64_t size() const = 0;
  virtual int64_t num_classes() const = 0;
  // {C, H, W} of every example Gather returns.
  virtual std::vector<int64_t> example_shape() const = 0;

  // The examples at `indices` (each in [0, size()), repeats allowed), in
  // that order. `seeds` holds one seed per example, the loader's example
  // seeds (random.h's ExampleSeed): a source that transforms examples at
  // random draws example i's choices from seeds[i] only, so batches do not
  // depend on which thread gathers them. kInvalidArgument for an index out
  // of range or a seed count other than indices.size(); a source reading
  // files reports a file it cannot read or decode, naming it.
  virtual absl::StatusOr<Examples> Gather(
      absl::Span<const int64_t> indices,
      absl::Span<const uint64_t> seeds) const = 0;

  // "fashion-mnist train: 60000 x [1, 28, 28] Byte, 10 classes".
  virtual std::string DebugString() const = 0;

  // The source as an in-memory Dataset, or nullptr: the loader can run the
  // deterministic front of a pipeline once over a Dataset's images.
  virtual const Dataset* AsDataset() const { return nullptr; }
};

}  // namespace dtrain::data

#endif  // DTRAIN_DATA_EXAMPLE_SOURCE_H_
