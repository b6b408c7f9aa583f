// The data section of train's options (--dataset, --data_dir, --image_size,
// the limits, the synthetic set, --batch_size, --workers, --even_batches):
// what each rank reads and in which batches. Consumed by training_data and
// run_parts' MakeLoader. A plain value type.
#ifndef DTRAIN_TRAINER_OPTIONS_DATA_OPTIONS_H_
#define DTRAIN_TRAINER_OPTIONS_DATA_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/optional.h"

namespace dtrain::trainer {

struct DataOptions {
  // "fashion-mnist" (default, Debian's dataset-fashion-mnist), "mnist",
  // "stl10" (needs data_dir), "synthetic", or "imagefolder" (needs data_dir
  // with train/ and val/, one folder of JPEG or PNG images per class).
  std::string dataset = "fashion-mnist";
  // Empty: the dataset's default location (Fashion-MNIST's Debian path).
  std::string data_dir;
  // Resize images to image_size x image_size; unset: STL-10 for ResNet-18 is
  // resized to 224 as in the AWS tutorial, everything else stays as stored.
  // For imagefolder, the crop size (default 224): RandomResizedCrop on
  // train, Resize(image_size * 256 / 224) + CenterCrop on val.
  absl::optional<int64_t> image_size;
  // Train on the first train_limit examples only (quick runs, tests); for
  // imagefolder, whose files are sorted by class, on train_limit examples
  // spread evenly over the folder.
  absl::optional<int64_t> train_limit;
  absl::optional<int64_t> val_limit;
  // The synthetic dataset: examples in the training and validation split, and
  // the shape of one example.
  int64_t synthetic_train_size = 2048;
  int64_t synthetic_val_size = 512;
  std::vector<int64_t> synthetic_shape = {1, 28, 28};
  int64_t synthetic_classes = 10;
  // Per process, as in the tutorials; the global batch is batch_size *
  // world_size.
  absl::optional<int64_t> batch_size;
  // Loader threads per process (0: batches are prepared on the training
  // thread).
  int workers = 0;
  // true: the training sampler pads every rank to the same number of
  // batches by repeating examples (PyTorch's DistributedSampler). false:
  // every example once per epoch, ranks differing by at most one batch; a
  // rank that runs out shadows the others (dist/ddp/join.h, PyTorch's Join;
  // Accelerate's even_batches=False). Validation always pads, and leaves the
  // padding out of its scores.
  bool even_batches = true;
  // With even_batches false: gradients averaged over the world size, ranks
  // that have run out contributing zeros (PyTorch's
  // divide_by_initial_world_size, its default), or over the ranks that still
  // have a batch.
  bool divide_by_initial_world_size = true;
};

// The dataset names LoadTrainingData knows.
const std::vector<std::string>& KnownDatasets();

// kInvalidArgument naming the flag. `batch_size` must be resolved
// (ResolveDefaults).
absl::Status ValidateDataOptions(const DataOptions& o);

}  // namespace dtrain::trainer

#endif  // DTRAIN_TRAINER_OPTIONS_DATA_OPTIONS_H_
