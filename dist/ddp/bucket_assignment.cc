#include "dist/ddp/bucket_assignment.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"

namespace dtrain::ddp::internal {

absl::StatusOr<std::vector<BucketAssignment>> AssignBuckets(
    absl::Span<const int64_t> bytes, absl::Span<const int> keys,
    const BucketCaps& caps) {
  if (caps.first_bytes <= 0 || caps.bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ddp: bucket caps must be positive, got first bucket ",
        caps.first_bytes, " bytes and others ", caps.bytes, " bytes"));
  }
  if (bytes.size() != keys.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ddp: ", bytes.size(), " sizes but ", keys.size(),
                     " keys for the bucket assignment"));
  }
  struct Open {
    BucketAssignment bucket;
    bool first = true;  // Still the key's first bucket.
  };
  std::map<int, Open> open;
  std::vector<BucketAssignment> done;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ddp: tensor ", i, " has a negative size (", bytes[i], " bytes)"));
    }
    Open& o = open[keys[i]];
    o.bucket.members.push_back(static_cast<int>(i));
    o.bucket.bytes += bytes[i];
    if (o.bucket.bytes >= (o.first ? caps.first_bytes : caps.bytes)) {
      done.push_back(std::move(o.bucket));
      o.bucket = BucketAssignment();
      o.first = false;
    }
  }
  for (auto& [key, o] : open) {
    if (!o.bucket.members.empty()) done.push_back(std::move(o.bucket));
  }
  std::sort(done.begin(), done.end(),
            [](const BucketAssignment& a, const BucketAssignment& b) {
              return a.members.front() < b.members.front();
            });
  return done;
}

}  // namespace dtrain::ddp::internal
