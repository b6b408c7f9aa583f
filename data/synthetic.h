// A seeded synthetic image dataset of any shape and class count, for
// benchmarks and tests that must not depend on files. It is learnable: each
// class has its own fixed random pattern, and an example is its class's
// pattern plus noise, so a model's accuracy rises well above chance within an
// epoch. The same options always give the same tensors, on any machine.
#ifndef DTRAIN_DATA_SYNTHETIC_H_
#define DTRAIN_DATA_SYNTHETIC_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "data/dataset.h"

namespace dtrain::data {

struct SyntheticOptions {
  int64_t size = 1024;  // Number of examples, >= 0.
  int64_t channels = 1;
  int64_t height = 28;
  int64_t width = 28;
  int64_t num_classes = 10;
  uint64_t seed = 0;
  // Half-width of the uniform noise added to the class pattern, 0..255.
  int noise = 48;
};

// uint8 images [size, channels, height, width], labels uniform over
// [0, num_classes). kInvalidArgument for a negative size, a dimension below
// 1, num_classes below 1, noise outside 0..255, or more than 2^40 bytes.
// Thread-safe.
absl::StatusOr<Dataset> MakeSyntheticDataset(const SyntheticOptions& options);

}  // namespace dtrain::data

#endif  // DTRAIN_DATA_SYNTHETIC_H_
