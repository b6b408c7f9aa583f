// DecodePng: libpng reading from memory through a bounds-checked callback,
// errors longjmp back instead of aborting, libpng's own dimension limits set
// to ours, and the size check before any pixel memory exists.
//
// setjmp/longjmp and C++: the function that calls setjmp (DecodePngInto)
// holds only trivially destructible locals; everything with a destructor
// lives in its caller, so a longjmp skips no destructor.

#include <png.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "data/image_decoder.h"

namespace dtrain::data {
namespace {

struct Context {
  const uint8_t* data;
  size_t size;
  size_t offset;
  char message[256];
};

void ReadData(png_structp png, png_bytep out, png_size_t n) {
  auto* ctx = static_cast<Context*>(png_get_io_ptr(png));
  if (n > ctx->size - ctx->offset) {
    png_error(png, "truncated: the data ends before the image does");
  }
  std::memcpy(out, ctx->data + ctx->offset, n);
  ctx->offset += n;
}

[[noreturn]] void Error(png_structp png, png_const_charp message) {
  auto* ctx = static_cast<Context*>(png_get_error_ptr(png));
  std::snprintf(ctx->message, sizeof(ctx->message), "%s", message);
  png_longjmp(png, 1);
}

// libpng warns about ancillary-chunk problems it recovers from, as PIL does.
void Warning(png_structp, png_const_charp) {}

enum class Outcome { kOk, kPngError, kSizeRefused };

// Decodes into *image, using *rows for the row pointers. Only trivially
// destructible locals.
Outcome DecodePngInto(Context* ctx, const DecodeLimits& limits, RgbImage* image,
                      std::vector<png_bytep>* rows) {
  png_structp png =
      png_create_read_struct(PNG_LIBPNG_VER_STRING, ctx, Error, Warning);
  if (png == nullptr) {
    std::snprintf(ctx->message, sizeof(ctx->message),
                  "libpng could not start (out of memory?)");
    return Outcome::kPngError;
  }
  png_infop info = png_create_info_struct(png);
  if (info == nullptr) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    std::snprintf(ctx->message, sizeof(ctx->message),
                  "libpng could not start (out of memory?)");
    return Outcome::kPngError;
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    return Outcome::kPngError;
  }
  png_set_read_fn(png, ctx, ReadData);
  const auto side = static_cast<png_uint_32>(
      std::min<int64_t>(limits.max_side, PNG_UINT_31_MAX));
  png_set_user_limits(png, side, side);
  png_read_info(png, info);
  image->width = png_get_image_width(png, info);
  image->height = png_get_image_height(png, info);
  if (image->height < 1 || image->width < 1 ||
      image->height > limits.max_side || image->width > limits.max_side ||
      image->height * image->width > limits.max_pixels) {
    png_destroy_read_struct(&png, &info, nullptr);
    return Outcome::kSizeRefused;
  }
  const int color = png_get_color_type(png, info);
  const int depth = png_get_bit_depth(png, info);
  // Deflate compresses at most 1032:1, so a file can hold no more than that
  // many bytes of rows: a header that declares more lies (a truncated file,
  // or a bomb), and is refused before the pixels are allocated.
  const double raw_bytes =
      static_cast<double>(image->height) *
      (1.0 + std::ceil(static_cast<double>(image->width) *
                       png_get_channels(png, info) * depth / 8.0));
  if (raw_bytes > 1032.0 * static_cast<double>(ctx->size) + 4096) {
    std::snprintf(ctx->message, sizeof(ctx->message),
                  "the header declares %lld x %lld pixels, more than %zu "
                  "bytes of compressed data can hold (deflate's limit is "
                  "1032:1): truncated or hostile",
                  static_cast<long long>(image->width),
                  static_cast<long long>(image->height), ctx->size);
    png_destroy_read_struct(&png, &info, nullptr);
    return Outcome::kPngError;
  }
  // To 8-bit RGB, as PIL's convert("RGB"): alpha and tRNS are dropped.
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if ((color & PNG_COLOR_MASK_COLOR) == 0) {
    if (depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    png_set_gray_to_rgb(png);
  }
  if (depth == 16) png_set_scale_16(png);
  if ((color & PNG_COLOR_MASK_ALPHA) != 0) png_set_strip_alpha(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  const size_t row_bytes = png_get_rowbytes(png, info);
  if (row_bytes != static_cast<size_t>(image->width) * 3 ||
      png_get_bit_depth(png, info) != 8 || png_get_channels(png, info) != 3) {
    std::snprintf(ctx->message, sizeof(ctx->message),
                  "unexpected decoder output (%d channels of %d bits)",
                  png_get_channels(png, info), png_get_bit_depth(png, info));
    png_destroy_read_struct(&png, &info, nullptr);
    return Outcome::kPngError;
  }
  image->pixels.resize(row_bytes * image->height);
  rows->resize(image->height);
  for (int64_t y = 0; y < image->height; ++y) {
    (*rows)[y] = image->pixels.data() + y * row_bytes;
  }
  png_read_image(png, rows->data());
  png_read_end(png, nullptr);
  png_destroy_read_struct(&png, &info, nullptr);
  return Outcome::kOk;
}

}  // namespace

absl::StatusOr<RgbImage> DecodePng(absl::string_view bytes,
                                   absl::string_view name,
                                   const DecodeLimits& limits) {
  Context ctx{
      reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), 0, {0}};
  RgbImage image;
  std::vector<png_bytep> rows;
  switch (DecodePngInto(&ctx, limits, &image, &rows)) {
    case Outcome::kOk:
      return image;
    case Outcome::kSizeRefused:
      return internal::CheckImageSize(image.height, image.width, limits, name);
    case Outcome::kPngError:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(name, ": damaged or unsupported PNG: ", ctx.message));
}

}  // namespace dtrain::data
