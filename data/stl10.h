// STL-10's binary format (https://cs.stanford.edu/~acoates/stl10/), the
// dataset of the ResNet-18 tutorial: 96x96 RGB images, 10 classes, 5,000
// labelled training and 8,000 test images.
// What is accepted and what is rejected: docs/FORMATS.md.
//
//   <split>_X.bin  N images of 3 x 96 x 96 uint8 each, each channel stored
//                  column-major (as MATLAB writes it);
//   <split>_y.bin  N uint8 labels 1..10.
//
// The reader returns images [N, 3, 96, 96] (channel, row, column), labels
// 0..9, like torchvision.datasets.STL10. Thread-safe.
#ifndef DTRAIN_DATA_STL10_H_
#define DTRAIN_DATA_STL10_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "data/dataset.h"

namespace dtrain::data {

inline constexpr int64_t kStl10ImageSize = 96;
inline constexpr int64_t kStl10Channels = 3;
inline constexpr int64_t kStl10NumClasses = 10;

// Loads a labelled split ("train" or "test") from `dir`, or from
// `dir`/stl10_binary (where the official archive extracts). Files may be
// gzip-compressed. kNotFound naming the paths tried and where to download the
// data when a file is missing; the errors of ReadStl10Files otherwise.
absl::StatusOr<Dataset> LoadStl10(absl::string_view dir, Split split);

// Reads one pair of files into a Dataset named `name`. kNotFound for a
// missing file; kInvalidArgument naming the path for: an image file whose
// size is not a multiple of 27,648 bytes (3 x 96 x 96), an image and a label
// count that differ, a label outside 1..10 (naming the example), corrupt
// gzip data.
absl::StatusOr<Dataset> ReadStl10Files(const std::string& images_path,
                                       const std::string& labels_path,
                                       std::string name);

}  // namespace dtrain::data

#endif  // DTRAIN_DATA_STL10_H_
