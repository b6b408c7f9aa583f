#include "trainer/report/scores.h"

#include <algorithm>
#include <vector>

#include "base/status_macros.h"

namespace dtrain::trainer {

absl::StatusOr<Scores> ScoresOverRanks(const backend::SmallCollectives& sync,
                                       double loss_sum, int64_t correct1,
                                       int64_t correct5, int64_t examples) {
  DTRAIN_ASSIGN_OR_RETURN(
      std::vector<double> sums,
      sync.AllReduce(
          {loss_sum, static_cast<double>(correct1),
           static_cast<double>(correct5), static_cast<double>(examples)},
          backend::ReduceOp::kSum));
  const double total = std::max(1.0, sums[3]);
  return Scores{sums[0] / total, 100.0 * sums[1] / total,
                100.0 * sums[2] / total, sums[3]};
}

}  // namespace dtrain::trainer
