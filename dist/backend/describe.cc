#include "dist/backend/describe.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace dtrain::backend {

std::string FormatBytes(int64_t bytes) {
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  if (bytes < (1 << 20)) return absl::StrFormat("%.3g KiB", bytes / 1024.0);
  if (bytes < (int64_t{1} << 30))
    return absl::StrFormat("%.3g MiB", bytes / 1048576.0);
  return absl::StrFormat("%.3g GiB", bytes / 1073741824.0);
}

std::string FormatElapsed(absl::Duration d) {
  return absl::FormatDuration(absl::Trunc(d, d < absl::Seconds(1)
                                                 ? absl::Milliseconds(1)
                                                 : absl::Milliseconds(100)));
}

}  // namespace dtrain::backend
