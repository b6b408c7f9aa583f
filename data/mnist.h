// MNIST and Fashion-MNIST: the same IDX files under the same names, so one
// loader serves both. Fashion-MNIST is the project's default dataset: Debian's
// dataset-fashion-mnist package installs it in kFashionMnistDir, which
// binaries use as the default of their --data_dir flag, so training runs with
// no flag at all. Point --data_dir at a folder with the MNIST files to train on
// MNIST.
//
// Thread-safe.
#ifndef DTRAIN_DATA_MNIST_H_
#define DTRAIN_DATA_MNIST_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "data/dataset.h"

namespace dtrain::data {

// Where Debian's dataset-fashion-mnist package installs Fashion-MNIST.
inline constexpr char kFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";

inline constexpr int64_t kMnistNumClasses = 10;
inline constexpr int64_t kMnistImageSize = 28;

// The file names of a split, without ".gz": {"train-images-idx3-ubyte",
// "train-labels-idx1-ubyte"} or {"t10k-images-idx3-ubyte",
// "t10k-labels-idx1-ubyte"}.
struct MnistFileNames {
  std::string images;
  std::string labels;
};
MnistFileNames MnistFiles(Split split);

// Loads one split from `dir`: images [N, 1, 28, 28] uint8 (60,000 for train,
// 10,000 for test in the real sets; other counts are accepted), labels in
// [0, 10). Each file is taken as <name>.gz, else <name>, else the
// <name with its last '-' replaced by '.'> spelling some mirrors use
// ("train-images.idx3-ubyte"). kNotFound when a file is missing, naming the
// paths tried and how to get the data; the errors of ReadIdxDataset
// otherwise.
absl::StatusOr<Dataset> LoadMnist(absl::string_view dir, Split split);

}  // namespace dtrain::data

#endif  // DTRAIN_DATA_MNIST_H_
