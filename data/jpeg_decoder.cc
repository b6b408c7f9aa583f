// DecodeJpeg: libjpeg-turbo with an error manager that longjmps back instead
// of calling exit(), a scan limit against progressive-JPEG CPU bombs, and the
// size check before any pixel memory exists.
//
// setjmp/longjmp and C++: the function that calls setjmp (DecodeJpegInto)
// holds only trivially destructible locals; everything with a destructor
// lives in its caller, so a longjmp skips no destructor.

#include <setjmp.h>

// jpeglib.h needs size_t and FILE declared before it.
// clang-format off
#include <cstddef>
#include <cstdio>
#include <jerror.h>
#include <jpeglib.h>
// clang-format on

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "data/image_decoder.h"

namespace dtrain::data {
namespace {

// libjpeg-turbo's own TurboJPEG API refuses more than 500 scans; a valid
// progressive JPEG has a dozen or so.
constexpr int kMaxScans = 500;

struct ErrorManager {
  jpeg_error_mgr pub;  // First: libjpeg sees a jpeg_error_mgr*.
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void ErrorExit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  longjmp(err->jump, 1);
}

// Warnings about corrupt data are tolerated, as PIL tolerates them, except a
// premature end of data: libjpeg would fill the rest of the image with grey,
// PIL refuses a truncated image.
void EmitMessage(j_common_ptr cinfo, int msg_level) {
  if (msg_level >= 0) return;  // Trace messages.
  if (cinfo->err->msg_code == JWRN_JPEG_EOF) {
    auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
    std::snprintf(err->message, sizeof(err->message),
                  "truncated: the data ends before the image does");
    longjmp(err->jump, 1);
  }
  ++cinfo->err->num_warnings;
}

void ProgressMonitor(j_common_ptr cinfo) {
  if (cinfo->is_decompressor) {
    auto* d = reinterpret_cast<j_decompress_ptr>(cinfo);
    if (d->input_scan_number > kMaxScans) {
      auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
      std::snprintf(err->message, sizeof(err->message),
                    "more than %d scans: refused", kMaxScans);
      longjmp(err->jump, 1);
    }
  }
}

enum class Outcome { kOk, kJpegError, kSizeRefused };

// Adobe's CMYK JPEGs store inverted ink values: R = C * K / 255 and so on.
void CmykRowToRgb(const uint8_t* cmyk, int64_t width, uint8_t* rgb) {
  for (int64_t x = 0; x < width; ++x) {
    const int k = cmyk[4 * x + 3];
    for (int c = 0; c < 3; ++c) {
      rgb[3 * x + c] = static_cast<uint8_t>((cmyk[4 * x + c] * k + 127) / 255);
    }
  }
}

// Decodes into *image; on failure fills `message` (kJpegError) or leaves the
// declared size in *image (kSizeRefused). Only trivially destructible locals.
Outcome DecodeJpegInto(const uint8_t* data, size_t size,
                       const DecodeLimits& limits, RgbImage* image,
                       char* message, size_t message_size) {
  jpeg_decompress_struct cinfo;
  ErrorManager err;
  jpeg_progress_mgr progress;
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = ErrorExit;
  err.pub.emit_message = EmitMessage;
  err.message[0] = '\0';
  if (setjmp(err.jump)) {
    std::snprintf(message, message_size, "%s", err.message);
    jpeg_destroy_decompress(&cinfo);
    return Outcome::kJpegError;
  }
  jpeg_create_decompress(&cinfo);
  progress.progress_monitor = ProgressMonitor;
  cinfo.progress = &progress;
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  image->height = cinfo.image_height;
  image->width = cinfo.image_width;
  if (image->height < 1 || image->width < 1 ||
      image->height > limits.max_side || image->width > limits.max_side ||
      image->height * image->width > limits.max_pixels) {
    jpeg_destroy_decompress(&cinfo);
    return Outcome::kSizeRefused;
  }
  const bool cmyk =
      cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
  cinfo.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  jpeg_start_decompress(&cinfo);
  const int components = cmyk ? 4 : 3;
  if (cinfo.output_components != components ||
      cinfo.output_width != cinfo.image_width ||
      cinfo.output_height != cinfo.image_height) {
    std::snprintf(message, message_size,
                  "unexpected decoder output (%d components, %u x %u)",
                  cinfo.output_components, cinfo.output_width,
                  cinfo.output_height);
    jpeg_destroy_decompress(&cinfo);
    return Outcome::kJpegError;
  }
  const int64_t width = image->width;
  image->pixels.resize(image->height * width * 3);
  JSAMPARRAY cmyk_row =
      cmyk ? (*cinfo.mem->alloc_sarray)(reinterpret_cast<j_common_ptr>(&cinfo),
                                        JPOOL_IMAGE, cinfo.output_width * 4, 1)
           : nullptr;
  while (cinfo.output_scanline < cinfo.output_height) {
    uint8_t* row =
        image->pixels.data() + int64_t{cinfo.output_scanline} * width * 3;
    JSAMPROW target = cmyk ? cmyk_row[0] : row;
    if (jpeg_read_scanlines(&cinfo, &target, 1) != 1) {
      std::snprintf(message, message_size, "no progress at row %u",
                    cinfo.output_scanline);
      jpeg_destroy_decompress(&cinfo);
      return Outcome::kJpegError;
    }
    if (cmyk) CmykRowToRgb(cmyk_row[0], width, row);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return Outcome::kOk;
}

}  // namespace

absl::StatusOr<RgbImage> DecodeJpeg(absl::string_view bytes,
                                    absl::string_view name,
                                    const DecodeLimits& limits) {
  RgbImage image;
  char message[JMSG_LENGTH_MAX + 64];
  switch (DecodeJpegInto(reinterpret_cast<const uint8_t*>(bytes.data()),
                         bytes.size(), limits, &image, message,
                         sizeof(message))) {
    case Outcome::kOk:
      return image;
    case Outcome::kSizeRefused:
      return internal::CheckImageSize(image.height, image.width, limits, name);
    case Outcome::kJpegError:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(name, ": damaged or unsupported JPEG: ", message));
}

}  // namespace dtrain::data
