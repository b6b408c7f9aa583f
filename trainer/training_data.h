// The datasets and input pipelines of a training run, chosen by
// TrainOptions: Fashion-MNIST (the default, from Debian's package), MNIST,
// STL-10 (resized to 224 for ResNet-18, as the AWS tutorial does) or a
// synthetic set, each with its train and test split and the tutorials'
// normalisation.
#ifndef DTRAIN_TRAINER_TRAINING_DATA_H_
#define DTRAIN_TRAINER_TRAINING_DATA_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/dataset.h"
#include "data/transforms.h"
#include "trainer/train_options.h"

namespace dtrain::trainer {

struct TrainingData {
  data::Dataset train;
  data::Dataset val;
  // The same deterministic transforms for both splits (no augmentation: the
  // tutorials train without it).
  data::TransformPipeline transforms;
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
// kInvalidArgument for options the data cannot honour. Every rank loads the
// whole dataset; the sampler picks its share.
absl::StatusOr<TrainingData> LoadTrainingData(const TrainOptions& options);

}  // namespace dtrain::trainer

#endif  // DTRAIN_TRAINER_TRAINING_DATA_H_
