// Encoding pixels as JPEG (libjpeg-turbo) and PNG (libpng), for the tests,
// the benchmarks and the tool that writes sample image folders: the
// ImageFolder reader is tested on files these write. Not part of the
// reading path, and not hardened against bad arguments (they are checked,
// and a failure is an error, but the inputs are the caller's own).
//
// Thread-safe (no shared state).
#ifndef DTRAIN_DATA_IMAGE_ENCODER_H_
#define DTRAIN_DATA_IMAGE_ENCODER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dtrain::data::testing {

// Interleaved samples: height x width pixels of `channels` samples each.
// For PNG, channels is 1 (gray), 2 (gray + alpha), 3 (RGB) or 4 (RGBA), and
// with bit_depth 16 every sample takes two bytes, most significant first
// (PNG's order). For JPEG, channels is 1, 3 or 4 (CMYK, the samples written
// as given, as Adobe's files hold them) and bit_depth 8.
struct Pixels {
  int64_t height = 0;
  int64_t width = 0;
  int channels = 3;
  int bit_depth = 8;
  std::vector<uint8_t> samples;
};

// A JPEG at `quality` (1-100), 4:4:4 (no chroma subsampling) at 90 and above;
// baseline, or progressive (several scans).
absl::StatusOr<std::string> EncodeJpeg(const Pixels& pixels, int quality,
                                       bool progressive = false);

// A PNG; `interlaced` writes Adam7. With `palette`, 8-bit RGB pixels are
// stored as a palette image (at most 256 distinct colours, else an error).
absl::StatusOr<std::string> EncodePng(const Pixels& pixels,
                                      bool interlaced = false,
                                      bool palette = false);

// A smooth, seeded RGB test pattern (JPEG keeps it within a few levels):
// gradients and a few soft blobs whose colours depend on `seed`.
Pixels TestPattern(int64_t height, int64_t width, uint64_t seed);

}  // namespace dtrain::data::testing

#endif  // DTRAIN_DATA_IMAGE_ENCODER_H_
