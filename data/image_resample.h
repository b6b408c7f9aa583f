// Bilinear resizing of 8-bit RGB images as PIL's Image.resize(size,
// Image.BILINEAR) does it, which is what torchvision's Resize and
// RandomResizedCrop run on the PIL images of its ImageFolder: a triangle
// filter widened by the scale factor when shrinking (antialiasing), weights
// in 22-bit fixed point, a horizontal pass then a vertical one, each rounded
// to 8 bits. (The batch transform Resize in transforms.h is the other
// flavour, interpolate() without antialiasing, for tensors.)
//
// Only a window of the resized image is computed, so Resize followed by a
// center crop costs what the crop needs, and an absurd aspect ratio cannot
// make a huge intermediate image.
//
// Pure functions; thread-safe.
#ifndef DTRAIN_DATA_IMAGE_RESAMPLE_H_
#define DTRAIN_DATA_IMAGE_RESAMPLE_H_

#include <cstdint>

namespace dtrain::data::internal {

// A rectangle of an interleaved RGB image: `height` rows of `width` pixels,
// 3 bytes each, rows `stride` bytes apart.
struct RgbView {
  const uint8_t* data;
  int64_t height;
  int64_t width;
  int64_t stride;
};

// The window of an out_height x out_width resize of `in` whose top-left
// corner is (top, left) and size window_height x window_width, written to
// `out` as three planes (R, G, B) of window_height x window_width bytes.
// Requires in.height, in.width, out_height, out_width >= 1 and the window
// inside the resized image (checked by the callers, not here).
void ResizeBilinearWindow(const RgbView& in, int64_t out_height,
                          int64_t out_width, int64_t top, int64_t left,
                          int64_t window_height, int64_t window_width,
                          uint8_t* out);

}  // namespace dtrain::data::internal

#endif  // DTRAIN_DATA_IMAGE_RESAMPLE_H_
