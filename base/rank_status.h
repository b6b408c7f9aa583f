// Every error a rank reports starts with "[rank R] ", so that interleaved
// logs of many processes say who failed. One helper for every layer that
// hands a Status to the user (rendezvous, trainer). Thread-safe.
#ifndef DTRAIN_BASE_RANK_STATUS_H_
#define DTRAIN_BASE_RANK_STATUS_H_

#include "absl/status/status.h"

namespace dtrain::base {

// `status` with "[rank R] " in front of its message; OK, and messages that
// already start with "[rank ", unchanged (a layer below may have said it).
absl::Status WithRank(int rank, const absl::Status& status);

}  // namespace dtrain::base

#endif  // DTRAIN_BASE_RANK_STATUS_H_
