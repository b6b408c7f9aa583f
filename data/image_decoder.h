// Decoding JPEG and PNG files into 8-bit RGB pixels, for the ImageFolder
// reader: libjpeg-turbo and libpng from Debian, driven so that damaged or
// hostile bytes give an error, never a crash or an exit().
//
// Every image comes out as interleaved 8-bit RGB, as torchvision's
// ImageFolder loader converts with PIL's .convert("RGB"): grayscale is
// repeated into three channels, palettes are expanded, alpha is dropped (not
// composited), 16-bit samples are scaled to 8 bits, CMYK JPEGs (Adobe's
// inverted convention) are converted. The format is recognised by the
// file's magic bytes, not its name.
//
// Decompression bombs: the dimensions a header declares are checked against
// DecodeLimits before any pixel memory is allocated.
//
// Thread safety: the functions are reentrant (no shared state); any number
// of threads may decode at once.
#ifndef DTRAIN_DATA_IMAGE_DECODER_H_
#define DTRAIN_DATA_IMAGE_DECODER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dtrain::data {

// A decoded image: height x width pixels, row-major, 3 bytes (R, G, B) each.
struct RgbImage {
  int64_t height = 0;
  int64_t width = 0;
  // height * width * 3 bytes.
  std::vector<uint8_t> pixels;
};

struct DecodeLimits {
  // Refuse images with a side longer than this (JPEG's own limit is 65,500).
  int64_t max_side = 65535;
  // Refuse images with more pixels than this: PIL's decompression-bomb
  // threshold (2 x Image.MAX_IMAGE_PIXELS), about 537 MB of RGB.
  int64_t max_pixels = 178956970;
};

enum class ImageFormat { kUnknown, kJpeg, kPng };

// The format the first bytes announce (JPEG: FF D8 FF; PNG: its 8-byte
// signature).
ImageFormat SniffImageFormat(absl::string_view bytes);

// Decodes a whole JPEG or PNG file held in `bytes`. `name` (usually the path)
// starts every error message. kInvalidArgument for data that is not JPEG or
// PNG, damaged, truncated, or larger than `limits`.
absl::StatusOr<RgbImage> DecodeImage(absl::string_view bytes,
                                     absl::string_view name,
                                     const DecodeLimits& limits = {});

// The two decoders behind DecodeImage; same contract, one format each.
absl::StatusOr<RgbImage> DecodeJpeg(absl::string_view bytes,
                                    absl::string_view name,
                                    const DecodeLimits& limits = {});
absl::StatusOr<RgbImage> DecodePng(absl::string_view bytes,
                                   absl::string_view name,
                                   const DecodeLimits& limits = {});

namespace internal {

// OK when a height x width image is within `limits`; kInvalidArgument
// naming `name` and the sizes otherwise. Shared by both decoders.
absl::Status CheckImageSize(int64_t height, int64_t width,
                            const DecodeLimits& limits, absl::string_view name);

}  // namespace internal

}  // namespace dtrain::data

#endif  // DTRAIN_DATA_IMAGE_DECODER_H_
