// The datasets and input pipelines of a training run, chosen by
// TrainOptions: Fashion-MNIST (the default, from Debian's package), MNIST,
// STL-10 (resized to 224 for ResNet-18, as the AWS tutorial does), a
// synthetic set, each with its train and test split and the tutorials'
// normalisation; or the user's own images (imagefolder: <data_dir>/train and
// <data_dir>/val, one folder per class, decoded per batch, with the ImageNet
// tutorial's augmentation and normalisation).
#ifndef DTRAIN_TRAINER_TRAINING_DATA_H_
#define DTRAIN_TRAINER_TRAINING_DATA_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/example_source.h"
#include "data/transforms.h"
#include "trainer/train_options.h"

namespace dtrain::trainer {

struct TrainingData {
  // In-memory Datasets, or ImageFolders that decode per batch.
  std::shared_ptr<const data::ExampleSource> train;
  std::shared_ptr<const data::ExampleSource> val;
  // The batch transforms of each split. For the in-memory sets the same
  // deterministic ones for both (no augmentation: the tutorials train
  // without it); for imagefolder a random flip on train (after the random
  // resized crop of the reader), then ToFloat and ImageNet's Normalize.
  data::TransformPipeline train_transforms;
  data::TransformPipeline val_transforms;
  int64_t num_classes = 0;
  // {C, H, W} of what the model sees, after the transforms.
  std::vector<int64_t> input_shape;
  // Where the data came from, for logs: "fashion-mnist from
  // /usr/share/datasets/fashion-mnist: 60000 train, 10000 test".
  std::string description;
};

// Loads both splits (cut to train_limit / val_limit) and builds the
// pipeline. The readers' errors (missing files name the paths tried and how
// to get the data; corrupt files name the file and the problem), and
// kInvalidArgument for options the data cannot honour, and for imagefolder
// train and val folders whose classes differ (naming both). Every rank loads
// the whole dataset (for imagefolder: lists all files); the sampler picks its
// share.
absl::StatusOr<TrainingData> LoadTrainingData(const TrainOptions& options);

}  // namespace dtrain::trainer

#endif  // DTRAIN_TRAINER_TRAINING_DATA_H_
