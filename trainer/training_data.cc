#include "trainer/training_data.h"

#include <algorithm>
#include <iterator>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "data/dataset.h"
#include "data/image_folder.h"
#include "data/image_transforms.h"
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

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (!dir.empty() && dir.back() == '/') return dir + name;
  return absl::StrCat(dir, "/", name);
}

// `limit` examples spread evenly over the folder (example floor(i * size /
// limit) for i < limit): its files are sorted by class, and a quick run on
// the first ones would see the first classes only.
absl::StatusOr<std::shared_ptr<const data::ImageFolder>> LimitFolder(
    std::shared_ptr<const data::ImageFolder> folder,
    const absl::optional<int64_t>& limit) {
  if (!limit || *limit >= folder->size()) return folder;
  std::vector<int64_t> indices(*limit);
  for (int64_t i = 0; i < *limit; ++i) indices[i] = i * folder->size() / *limit;
  return folder->Subset(indices);
}

// The ImageNet tutorial's input pipeline on <data_dir>/train and /val:
// RandomResizedCrop(size) + flip for training, Resize(size * 256 / 224) +
// CenterCrop(size) for validation, ImageNet's mean and std for both.
absl::StatusOr<TrainingData> LoadImageFolders(const TrainOptions& o) {
  const int64_t size = o.data.image_size.value_or(224);
  const std::string train_dir = JoinPath(o.data.data_dir, "train");
  const std::string val_dir = JoinPath(o.data.data_dir, "val");
  data::ImageFolderOptions train_options;
  DTRAIN_ASSIGN_OR_RETURN(train_options.transform,
                          data::RandomResizedCrop(size));
  train_options.name = "imagefolder train";
  data::ImageFolderOptions val_options;
  DTRAIN_ASSIGN_OR_RETURN(val_options.transform,
                          data::ResizeCenterCrop(size * 256 / 224, size));
  val_options.name = "imagefolder val";
  DTRAIN_ASSIGN_OR_RETURN(std::shared_ptr<const data::ImageFolder> train,
                          data::ImageFolder::Open(train_dir, train_options));
  DTRAIN_ASSIGN_OR_RETURN(std::shared_ptr<const data::ImageFolder> val,
                          data::ImageFolder::Open(val_dir, val_options));
  if (train->classes() != val->classes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--dataset=imagefolder: the class folders of ", train_dir, " (",
        train->num_classes(), ": ", absl::StrJoin(train->classes(), ", "),
        ") and ", val_dir, " (", val->num_classes(), ": ",
        absl::StrJoin(val->classes(), ", "),
        ") differ; both need the same classes, or labels would mean "
        "different things"));
  }
  DTRAIN_ASSIGN_OR_RETURN(train,
                          LimitFolder(std::move(train), o.data.train_limit));
  DTRAIN_ASSIGN_OR_RETURN(val, LimitFolder(std::move(val), o.data.val_limit));
  const std::vector<double> mean(std::begin(data::kImageNetMean),
                                 std::end(data::kImageNetMean));
  const std::vector<double> std(std::begin(data::kImageNetStd),
                                std::end(data::kImageNetStd));
  DTRAIN_ASSIGN_OR_RETURN(data::TransformPipeline train_transforms,
                          data::TransformPipeline::Builder()
                              .RandomHorizontalFlip()
                              .ToFloat()
                              .Normalize(mean, std)
                              .Build());
  DTRAIN_ASSIGN_OR_RETURN(data::TransformPipeline val_transforms,
                          data::TransformPipeline::Builder()
                              .ToFloat()
                              .Normalize(mean, std)
                              .Build());
  TrainingData out;
  out.num_classes = train->num_classes();
  out.input_shape = {3, size, size};
  out.description = absl::StrCat(
      "imagefolder from ", o.data.data_dir, ": ", train->size(), " train, ",
      val->size(), " val, ", out.num_classes, " classes, 3x", size, "x", size,
      " (", train->ignored_files() + val->ignored_files(),
      " other files ignored)");
  out.train = std::move(train);
  out.val = std::move(val);
  out.train_transforms = std::move(train_transforms);
  out.val_transforms = std::move(val_transforms);
  return out;
}

}  // namespace

absl::StatusOr<TrainingData> LoadTrainingData(const TrainOptions& o) {
  if (o.data.dataset == "imagefolder") return LoadImageFolders(o);
  absl::StatusOr<data::Dataset> train = absl::UnknownError("unset");
  absl::StatusOr<data::Dataset> val = absl::UnknownError("unset");
  std::vector<double> mean;
  std::vector<double> std;
  std::string source;
  if (o.data.dataset == "fashion-mnist" || o.data.dataset == "mnist") {
    const std::string dir = o.data.data_dir.empty()
                                ? (o.data.dataset == "fashion-mnist"
                                       ? std::string(data::kFashionMnistDir)
                                       : std::string())
                                : o.data.data_dir;
    if (dir.empty()) {
      return absl::InvalidArgumentError(
          "--dataset=mnist needs --data_dir with the MNIST IDX files "
          "(train-images-idx3-ubyte.gz, ...); the embedded default is "
          "--dataset=fashion-mnist");
    }
    train = data::LoadMnist(dir, data::Split::kTrain);
    if (train.ok()) val = data::LoadMnist(dir, data::Split::kTest);
    const bool fashion = o.data.dataset == "fashion-mnist";
    mean = {fashion ? data::kFashionMnistMean : data::kMnistMean};
    std = {fashion ? data::kFashionMnistStd : data::kMnistStd};
    source = absl::StrCat(o.data.dataset, " from ", dir);
  } else if (o.data.dataset == "stl10") {
    train = data::LoadStl10(o.data.data_dir, data::Split::kTrain);
    if (train.ok()) val = data::LoadStl10(o.data.data_dir, data::Split::kTest);
    // The AWS tutorial's Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)).
    mean = {0.5};
    std = {0.5};
    source = absl::StrCat("stl10 from ", o.data.data_dir);
  } else if (o.data.dataset == "synthetic") {
    data::SyntheticOptions s;
    s.channels = o.data.synthetic_shape[0];
    s.height = o.data.synthetic_shape[1];
    s.width = o.data.synthetic_shape[2];
    s.num_classes = o.data.synthetic_classes;
    // One set cut in two: example i does not depend on the set's size, and
    // both splits share the class patterns.
    s.size = o.data.synthetic_train_size + o.data.synthetic_val_size;
    DTRAIN_ASSIGN_OR_RETURN(data::Dataset both, data::MakeSyntheticDataset(s));
    train = both.Slice(0, o.data.synthetic_train_size);
    val = both.Slice(o.data.synthetic_train_size, both.size());
    mean = {0.5};
    std = {0.25};
    source = "synthetic";
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--dataset: unknown dataset '", o.data.dataset, "'"));
  }
  DTRAIN_RETURN_IF_ERROR(train.status());
  DTRAIN_RETURN_IF_ERROR(val.status());
  DTRAIN_ASSIGN_OR_RETURN(data::Dataset train_cut,
                          Limit(*std::move(train), o.data.train_limit));
  DTRAIN_ASSIGN_OR_RETURN(data::Dataset val_cut,
                          Limit(*std::move(val), o.data.val_limit));

  std::vector<int64_t> shape = train_cut.example_shape();
  data::TransformPipeline::Builder builder;
  // Resizing first keeps the precomputed images in uint8 (a quarter of the
  // memory of floats; see data/loader.h).
  if (o.data.image_size &&
      (shape[1] != *o.data.image_size || shape[2] != *o.data.image_size)) {
    builder.Resize(*o.data.image_size, *o.data.image_size);
    shape[1] = shape[2] = *o.data.image_size;
  }
  if (o.model.name == "resnet18" && shape[0] == 1) {
    builder.GrayscaleToRgb();
    shape[0] = 3;
  }
  builder.ToFloat().Normalize(mean, std);
  DTRAIN_ASSIGN_OR_RETURN(data::TransformPipeline transforms, builder.Build());

  TrainingData out;
  out.num_classes = train_cut.num_classes();
  out.input_shape = shape;
  out.description =
      absl::StrCat(source, ": ", train_cut.size(), " train, ", val_cut.size(),
                   " test, ", shape[0], "x", shape[1], "x", shape[2]);
  out.train = std::make_shared<const data::Dataset>(std::move(train_cut));
  out.val = std::make_shared<const data::Dataset>(std::move(val_cut));
  out.train_transforms = transforms;
  out.val_transforms = std::move(transforms);
  return out;
}

}  // namespace dtrain::trainer
