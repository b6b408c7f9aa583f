#include "trainer/training_data.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "data/mnist.h"
#include "data/stl10.h"
#include "data/synthetic.h"

namespace dtrain::trainer {
namespace {

absl::StatusOr<data::Dataset> Limit(data::Dataset dataset,
                                    const absl::optional<int64_t>& limit) {
  if (!limit || *limit >= dataset.size()) return dataset;
  return dataset.Slice(0, *limit);
}

}  // namespace

absl::StatusOr<TrainingData> LoadTrainingData(const TrainOptions& o) {
  absl::StatusOr<data::Dataset> train = absl::UnknownError("unset");
  absl::StatusOr<data::Dataset> val = absl::UnknownError("unset");
  std::vector<double> mean;
  std::vector<double> std;
  std::string source;
  if (o.dataset == "fashion-mnist" || o.dataset == "mnist") {
    const std::string dir = o.data_dir.empty()
                                ? (o.dataset == "fashion-mnist"
                                       ? std::string(data::kFashionMnistDir)
                                       : std::string())
                                : o.data_dir;
    if (dir.empty()) {
      return absl::InvalidArgumentError(
          "--dataset=mnist needs --data_dir with the MNIST IDX files "
          "(train-images-idx3-ubyte.gz, ...); the embedded default is "
          "--dataset=fashion-mnist");
    }
    train = data::LoadMnist(dir, data::Split::kTrain);
    if (train.ok()) val = data::LoadMnist(dir, data::Split::kTest);
    const bool fashion = o.dataset == "fashion-mnist";
    mean = {fashion ? data::kFashionMnistMean : data::kMnistMean};
    std = {fashion ? data::kFashionMnistStd : data::kMnistStd};
    source = absl::StrCat(o.dataset, " from ", dir);
  } else if (o.dataset == "stl10") {
    train = data::LoadStl10(o.data_dir, data::Split::kTrain);
    if (train.ok()) val = data::LoadStl10(o.data_dir, data::Split::kTest);
    // The AWS tutorial's Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)).
    mean = {0.5};
    std = {0.5};
    source = absl::StrCat("stl10 from ", o.data_dir);
  } else if (o.dataset == "synthetic") {
    data::SyntheticOptions s;
    s.channels = o.synthetic_shape[0];
    s.height = o.synthetic_shape[1];
    s.width = o.synthetic_shape[2];
    s.num_classes = o.synthetic_classes;
    // One set cut in two: example i does not depend on the set's size, and
    // both splits share the class patterns.
    s.size = o.synthetic_train_size + o.synthetic_val_size;
    DTRAIN_ASSIGN_OR_RETURN(data::Dataset both, data::MakeSyntheticDataset(s));
    train = both.Slice(0, o.synthetic_train_size);
    val = both.Slice(o.synthetic_train_size, both.size());
    mean = {0.5};
    std = {0.25};
    source = "synthetic";
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--dataset: unknown dataset '", o.dataset, "'"));
  }
  if (!train.ok()) return train.status();
  if (!val.ok()) return val.status();
  DTRAIN_ASSIGN_OR_RETURN(data::Dataset train_cut,
                          Limit(*std::move(train), o.train_limit));
  DTRAIN_ASSIGN_OR_RETURN(data::Dataset val_cut,
                          Limit(*std::move(val), o.val_limit));

  std::vector<int64_t> shape = train_cut.example_shape();
  data::TransformPipeline::Builder builder;
  // Resizing first keeps the precomputed images in uint8 (a quarter of the
  // memory of floats; see data/loader.h).
  if (o.image_size &&
      (shape[1] != *o.image_size || shape[2] != *o.image_size)) {
    builder.Resize(*o.image_size, *o.image_size);
    shape[1] = shape[2] = *o.image_size;
  }
  if (o.model == "resnet18" && shape[0] == 1) {
    builder.GrayscaleToRgb();
    shape[0] = 3;
  }
  builder.ToFloat().Normalize(mean, std);
  DTRAIN_ASSIGN_OR_RETURN(data::TransformPipeline transforms, builder.Build());

  TrainingData out{std::move(train_cut),
                   std::move(val_cut),
                   std::move(transforms),
                   0,
                   shape,
                   ""};
  out.num_classes = out.train.num_classes();
  out.description =
      absl::StrCat(source, ": ", out.train.size(), " train, ", out.val.size(),
                   " test, ", shape[0], "x", shape[1], "x", shape[2]);
  return out;
}

}  // namespace dtrain::trainer
