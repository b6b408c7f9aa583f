// Loss and accuracy over every rank's examples, from each rank's sums: the
// training pass's (the recorder) and the validation pass's (evaluation.h).
// Collective: one allreduce, every rank calls it.
#ifndef DTRAIN_TRAINER_REPORT_SCORES_H_
#define DTRAIN_TRAINER_REPORT_SCORES_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "dist/backend/small_collectives.h"

namespace dtrain::trainer {

struct Scores {
  double loss = 0;  // mean per example
  double top1 = 0;  // percent
  double top5 = 0;  // percent
  double examples = 0;
};

// Exact: the sums are float64, exact for counts below 2^53.
absl::StatusOr<Scores> ScoresOverRanks(const backend::SmallCollectives& sync,
                                       double loss_sum, int64_t correct1,
                                       int64_t correct5, int64_t examples);

}  // namespace dtrain::trainer

#endif  // DTRAIN_TRAINER_REPORT_SCORES_H_
