#include "data/image_decoder.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace dtrain::data {

ImageFormat SniffImageFormat(absl::string_view bytes) {
  static constexpr char kPngSignature[] = "\x89PNG\r\n\x1a\n";
  if (bytes.size() >= 3 && static_cast<uint8_t>(bytes[0]) == 0xff &&
      static_cast<uint8_t>(bytes[1]) == 0xd8 &&
      static_cast<uint8_t>(bytes[2]) == 0xff) {
    return ImageFormat::kJpeg;
  }
  if (bytes.size() >= 8 && std::memcmp(bytes.data(), kPngSignature, 8) == 0) {
    return ImageFormat::kPng;
  }
  return ImageFormat::kUnknown;
}

absl::StatusOr<RgbImage> DecodeImage(absl::string_view bytes,
                                     absl::string_view name,
                                     const DecodeLimits& limits) {
  switch (SniffImageFormat(bytes)) {
    case ImageFormat::kJpeg:
      return DecodeJpeg(bytes, name, limits);
    case ImageFormat::kPng:
      return DecodePng(bytes, name, limits);
    case ImageFormat::kUnknown:
      break;
  }
  if (bytes.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": not a JPEG or PNG file: the file is empty"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(name, ": not a JPEG or PNG file (", bytes.size(),
                   " bytes, with neither signature at the start)"));
}

namespace internal {

absl::Status CheckImageSize(int64_t height, int64_t width,
                            const DecodeLimits& limits,
                            absl::string_view name) {
  if (height < 1 || width < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": the header declares an empty image, ", width, " x ", height));
  }
  if (height > limits.max_side || width > limits.max_side ||
      height * width > limits.max_pixels) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": the header declares ", width, " x ", height,
                     " pixels, more than the limit (sides <= ", limits.max_side,
                     ", <= ", limits.max_pixels,
                     " pixels): refused as a possible decompression bomb"));
  }
  return absl::OkStatus();
}

}  // namespace internal

}  // namespace dtrain::data
