#include "data/image_encoder.h"

#include <setjmp.h>

// jpeglib.h needs size_t and FILE declared before it.
// clang-format off
#include <cstddef>
#include <cstdio>
#include <jpeglib.h>
// clang-format on

#include <png.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "data/random.h"

namespace dtrain::data::testing {
namespace {

struct JpegError {
  jpeg_error_mgr pub;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void JpegErrorExit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  longjmp(err->jump, 1);
}

// Only trivially destructible locals (setjmp); the output goes to *buffer,
// malloc'ed by libjpeg.
bool CompressJpeg(const Pixels& p, int quality, bool progressive,
                  unsigned char** buffer, unsigned long* size, char* message) {
  jpeg_compress_struct cinfo;
  JpegError err;
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = JpegErrorExit;
  if (setjmp(err.jump)) {
    std::snprintf(message, JMSG_LENGTH_MAX, "%s", err.message);
    jpeg_destroy_compress(&cinfo);
    return false;
  }
  jpeg_create_compress(&cinfo);
  jpeg_mem_dest(&cinfo, buffer, size);
  cinfo.image_width = static_cast<JDIMENSION>(p.width);
  cinfo.image_height = static_cast<JDIMENSION>(p.height);
  cinfo.input_components = p.channels;
  cinfo.in_color_space = p.channels == 1   ? JCS_GRAYSCALE
                         : p.channels == 4 ? JCS_CMYK
                                           : JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  if (progressive) jpeg_simple_progression(&cinfo);
  if (quality >= 90) {
    for (int c = 0; c < cinfo.num_components; ++c) {
      cinfo.comp_info[c].h_samp_factor = 1;
      cinfo.comp_info[c].v_samp_factor = 1;
    }
  }
  jpeg_start_compress(&cinfo, TRUE);
  const int64_t stride = p.width * p.channels;
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row =
        const_cast<JSAMPROW>(p.samples.data() + cinfo.next_scanline * stride);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  return true;
}

struct PngOut {
  std::string* bytes;
  char message[256];
};

void PngWrite(png_structp png, png_bytep data, png_size_t n) {
  auto* out = static_cast<PngOut*>(png_get_io_ptr(png));
  out->bytes->append(reinterpret_cast<const char*>(data), n);
}
void PngFlush(png_structp) {}

[[noreturn]] void PngError(png_structp png, png_const_charp message) {
  auto* out = static_cast<PngOut*>(png_get_error_ptr(png));
  std::snprintf(out->message, sizeof(out->message), "%s", message);
  png_longjmp(png, 1);
}

// Only trivially destructible locals (setjmp); rows and palette indices are
// prepared by the caller.
bool CompressPng(const Pixels& p, bool interlaced, const png_color* palette,
                 int palette_size, png_bytep* rows, PngOut* out) {
  png_structp png =
      png_create_write_struct(PNG_LIBPNG_VER_STRING, out, PngError, nullptr);
  if (png == nullptr) return false;
  png_infop info = png_create_info_struct(png);
  if (info == nullptr || setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return false;
  }
  png_set_write_fn(png, out, PngWrite, PngFlush);
  static constexpr int kColorTypes[] = {
      0, PNG_COLOR_TYPE_GRAY, PNG_COLOR_TYPE_GRAY_ALPHA, PNG_COLOR_TYPE_RGB,
      PNG_COLOR_TYPE_RGB_ALPHA};
  png_set_IHDR(
      png, info, static_cast<png_uint_32>(p.width),
      static_cast<png_uint_32>(p.height), p.bit_depth,
      palette != nullptr ? PNG_COLOR_TYPE_PALETTE : kColorTypes[p.channels],
      interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
      PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (palette != nullptr) png_set_PLTE(png, info, palette, palette_size);
  png_write_info(png, info);
  png_write_image(png, rows);
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return true;
}

absl::Status CheckPixels(const Pixels& p) {
  const int64_t bytes_per_sample = p.bit_depth / 8;
  if (p.height < 1 || p.width < 1 || p.channels < 1 || p.channels > 4 ||
      (p.bit_depth != 8 && p.bit_depth != 16) ||
      static_cast<int64_t>(p.samples.size()) !=
          p.height * p.width * p.channels * bytes_per_sample) {
    return absl::InvalidArgumentError(absl::StrCat(
        "encoder: bad pixels ", p.width, " x ", p.height, " x ", p.channels,
        " at ", p.bit_depth, " bits with ", p.samples.size(), " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> EncodeJpeg(const Pixels& pixels, int quality,
                                       bool progressive) {
  DTRAIN_RETURN_IF_ERROR(CheckPixels(pixels));
  if (pixels.channels == 2 || pixels.bit_depth != 8 || quality < 1 ||
      quality > 100) {
    return absl::InvalidArgumentError(
        "EncodeJpeg: needs 1, 3 or 4 channels of 8 bits, quality 1-100");
  }
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  char message[JMSG_LENGTH_MAX] = {0};
  const bool ok =
      CompressJpeg(pixels, quality, progressive, &buffer, &size, message);
  std::string out;
  if (ok) out.assign(reinterpret_cast<const char*>(buffer), size);
  std::free(buffer);
  if (!ok) return absl::InternalError(absl::StrCat("EncodeJpeg: ", message));
  return out;
}

absl::StatusOr<std::string> EncodePng(const Pixels& pixels, bool interlaced,
                                      bool palette) {
  DTRAIN_RETURN_IF_ERROR(CheckPixels(pixels));
  std::vector<uint8_t> indices;
  std::vector<png_color> colors;
  const uint8_t* data = pixels.samples.data();
  int64_t stride = pixels.width * pixels.channels * (pixels.bit_depth / 8);
  if (palette) {
    if (pixels.channels != 3 || pixels.bit_depth != 8) {
      return absl::InvalidArgumentError("EncodePng: palette needs 8-bit RGB");
    }
    std::map<uint32_t, uint8_t> index_of;
    indices.resize(pixels.height * pixels.width);
    for (size_t i = 0; i < indices.size(); ++i) {
      const uint8_t* px = &pixels.samples[3 * i];
      const uint32_t key = (px[0] << 16) | (px[1] << 8) | px[2];
      auto [it, added] =
          index_of.emplace(key, static_cast<uint8_t>(colors.size()));
      if (added) {
        if (colors.size() == 256) {
          return absl::InvalidArgumentError(
              "EncodePng: more than 256 colours for a palette");
        }
        colors.push_back({px[0], px[1], px[2]});
      }
      indices[i] = it->second;
    }
    data = indices.data();
    stride = pixels.width;
  }
  std::vector<png_bytep> rows(pixels.height);
  for (int64_t y = 0; y < pixels.height; ++y) {
    rows[y] = const_cast<png_bytep>(data + y * stride);
  }
  std::string bytes;
  PngOut out{&bytes, {0}};
  if (!CompressPng(pixels, interlaced, palette ? colors.data() : nullptr,
                   static_cast<int>(colors.size()), rows.data(), &out)) {
    return absl::InternalError(absl::StrCat("EncodePng: ", out.message));
  }
  return bytes;
}

Pixels TestPattern(int64_t height, int64_t width, uint64_t seed) {
  internal::SplitMix64 rng(seed);
  double base[3], gx[3], gy[3], blob[3];
  for (int c = 0; c < 3; ++c) {
    base[c] = 30 + rng.UniformDouble() * 60;
    gx[c] = rng.UniformDouble() * 70;
    gy[c] = rng.UniformDouble() * 70;
    blob[c] = rng.UniformDouble() * 60 - 30;
  }
  const double cx = rng.UniformDouble(), cy = rng.UniformDouble();
  Pixels p;
  p.height = height;
  p.width = width;
  p.samples.resize(height * width * 3);
  for (int64_t y = 0; y < height; ++y) {
    for (int64_t x = 0; x < width; ++x) {
      const double u = (x + 0.5) / width, v = (y + 0.5) / height;
      const double d = (u - cx) * (u - cx) + (v - cy) * (v - cy);
      const double g = std::exp(-d * 8);
      for (int c = 0; c < 3; ++c) {
        const double value = base[c] + gx[c] * u + gy[c] * v + blob[c] * g;
        p.samples[(y * width + x) * 3 + c] =
            static_cast<uint8_t>(std::clamp(std::lround(value), 0L, 255L));
      }
    }
  }
  return p;
}

}  // namespace dtrain::data::testing
