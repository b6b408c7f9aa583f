#include "bench/sweep.h"

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace dtrain::bench {

absl::StatusOr<int64_t> ParseBytes(const std::string& flag,
                                   const std::string& given) {
  std::string text = given;
  int64_t unit = 1;
  if (!text.empty()) {
    switch (text.back()) {
      case 'K':
      case 'k':
        unit = int64_t{1} << 10;
        break;
      case 'M':
      case 'm':
        unit = int64_t{1} << 20;
        break;
      case 'G':
      case 'g':
        unit = int64_t{1} << 30;
        break;
      default:
        break;
    }
    if (unit != 1) text.pop_back();
  }
  int64_t value = 0;
  if (!absl::SimpleAtoi(text, &value) || value <= 0 ||
      value > (int64_t{1} << 40) / unit || value * unit % 4 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", flag, "=", given,
        ": want a positive multiple of 4 bytes, e.g. 1048576 or 1M"));
  }
  return value * unit;
}

absl::StatusOr<std::vector<int64_t>> SweepSizes(int64_t min_bytes,
                                                int64_t max_bytes, int factor) {
  if (min_bytes > max_bytes || factor < 2) {
    return absl::InvalidArgumentError(
        "want --min_bytes <= --max_bytes and --step_factor >= 2");
  }
  std::vector<int64_t> sizes;
  for (int64_t b = min_bytes; b <= max_bytes; b *= factor) sizes.push_back(b);
  return sizes;
}

double AllReduceBusFactor(int world_size) {
  return world_size > 0 ? 2.0 * (world_size - 1) / world_size : 0.0;
}

}  // namespace dtrain::bench
