#include "base/rank_status.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace dtrain::base {

absl::Status WithRank(int rank, const absl::Status& status) {
  if (status.ok() || absl::StartsWith(status.message(), "[rank ")) {
    return status;
  }
  return absl::Status(status.code(),
                      absl::StrCat("[rank ", rank, "] ", status.message()));
}

}  // namespace dtrain::base
