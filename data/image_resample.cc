#include "data/image_resample.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace dtrain::data::internal {
namespace {

// PIL's Resample.c: 32 bits minus 8 for the sample, minus 2 for sign and
// overflow headroom.
constexpr int kPrecisionBits = 32 - 8 - 2;

// Filter weights of output positions [first, first + count) of a resize of
// in_size samples to out_size: output i reads `size[i]` inputs from
// `start[i]` on, with weights k[i * ksize ...].
struct Coefficients {
  int64_t ksize = 0;
  std::vector<int64_t> start;
  std::vector<int64_t> size;
  std::vector<int32_t> k;
};

double Triangle(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

// precompute_coeffs and normalize_coeffs_8bpc of PIL's Resample.c.
Coefficients Compute(int64_t in_size, int64_t out_size, int64_t first,
                     int64_t count) {
  const double scale = static_cast<double>(in_size) / out_size;
  const double filter_scale = std::max(scale, 1.0);
  const double support = 1.0 * filter_scale;
  Coefficients c;
  c.ksize = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  c.start.resize(count);
  c.size.resize(count);
  c.k.assign(count * c.ksize, 0);
  std::vector<double> w(c.ksize);
  for (int64_t i = 0; i < count; ++i) {
    const double center = (first + i + 0.5) * scale;
    const int64_t lo =
        std::max<int64_t>(0, static_cast<int64_t>(center - support + 0.5));
    const int64_t hi = std::min<int64_t>(
        in_size, static_cast<int64_t>(center + support + 0.5));
    const int64_t n = std::min(std::max<int64_t>(hi - lo, 0), c.ksize);
    double total = 0;
    for (int64_t x = 0; x < n; ++x) {
      w[x] = Triangle((x + lo - center + 0.5) / filter_scale);
      total += w[x];
    }
    for (int64_t x = 0; x < n; ++x) {
      const double v = total != 0 ? w[x] / total : w[x];
      c.k[i * c.ksize + x] =
          static_cast<int32_t>(v < 0 ? -0.5 + v * (1 << kPrecisionBits)
                                     : 0.5 + v * (1 << kPrecisionBits));
    }
    c.start[i] = lo;
    c.size[i] = n;
  }
  return c;
}

inline uint8_t Clip8(int64_t v) {
  v >>= kPrecisionBits;
  return static_cast<uint8_t>(std::clamp<int64_t>(v, 0, 255));
}

}  // namespace

void ResizeBilinearWindow(const RgbView& in, int64_t out_height,
                          int64_t out_width, int64_t top, int64_t left,
                          int64_t window_height, int64_t window_width,
                          uint8_t* out) {
  const Coefficients h = Compute(in.width, out_width, left, window_width);
  const Coefficients v = Compute(in.height, out_height, top, window_height);
  // The input rows the vertical pass reads.
  int64_t row_lo = in.height, row_hi = 0;
  for (int64_t y = 0; y < window_height; ++y) {
    row_lo = std::min(row_lo, v.start[y]);
    row_hi = std::max(row_hi, v.start[y] + v.size[y]);
  }
  if (row_hi <= row_lo) row_lo = row_hi = 0;

  // Horizontal pass over those rows, kept interleaved and rounded to 8 bits
  // as PIL keeps its intermediate image.
  std::vector<uint8_t> mid((row_hi - row_lo) * window_width * 3);
  for (int64_t r = row_lo; r < row_hi; ++r) {
    const uint8_t* src = in.data + r * in.stride;
    uint8_t* dst = mid.data() + (r - row_lo) * window_width * 3;
    for (int64_t x = 0; x < window_width; ++x) {
      const int32_t* k = &h.k[x * h.ksize];
      const uint8_t* p = src + h.start[x] * 3;
      int64_t s0 = 1 << (kPrecisionBits - 1), s1 = s0, s2 = s0;
      for (int64_t j = 0; j < h.size[x]; ++j) {
        s0 += int64_t{p[3 * j]} * k[j];
        s1 += int64_t{p[3 * j + 1]} * k[j];
        s2 += int64_t{p[3 * j + 2]} * k[j];
      }
      dst[3 * x] = Clip8(s0);
      dst[3 * x + 1] = Clip8(s1);
      dst[3 * x + 2] = Clip8(s2);
    }
  }

  // Vertical pass into the three planes.
  const int64_t plane = window_height * window_width;
  const int64_t mid_stride = window_width * 3;
  for (int64_t y = 0; y < window_height; ++y) {
    const int32_t* k = &v.k[y * v.ksize];
    const uint8_t* base = mid.data() + (v.start[y] - row_lo) * mid_stride;
    for (int64_t x = 0; x < window_width; ++x) {
      int64_t s0 = 1 << (kPrecisionBits - 1), s1 = s0, s2 = s0;
      const uint8_t* p = base + 3 * x;
      for (int64_t j = 0; j < v.size[y]; ++j) {
        s0 += int64_t{p[j * mid_stride]} * k[j];
        s1 += int64_t{p[j * mid_stride + 1]} * k[j];
        s2 += int64_t{p[j * mid_stride + 2]} * k[j];
      }
      const int64_t o = y * window_width + x;
      out[o] = Clip8(s0);
      out[plane + o] = Clip8(s1);
      out[2 * plane + o] = Clip8(s2);
    }
  }
}

}  // namespace dtrain::data::internal
