// The validation pass: loss and top-1/top-5 accuracy of a model over a split
// that the ranks share through their DistributedSampler, every example
// counted exactly once (the sampler's padding left out) and the totals summed
// exactly over ranks.
//
// Collective: every rank calls with its own loader over the same split, in
// the same order relative to its other collectives.
#ifndef DTRAIN_TRAINER_EVALUATION_H_
#define DTRAIN_TRAINER_EVALUATION_H_

#include <c10/core/Device.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "data/loader.h"
#include "dist/backend/backend.h"
#include "dist/backend/small_collectives.h"
#include "models/model.h"
#include "trainer/report/scores.h"

namespace dtrain::trainer {

struct EvaluationOptions {
  // Batches per rank (0: the whole split, which the ranks must then count
  // exactly). A few batches make a sanity check before training, as
  // Lightning's num_sanity_val_steps: a broken split or model fails in
  // seconds instead of after the first epoch.
  int64_t max_batches = 0;
  // When set, every batch carries a vote of whether a stop was requested
  // here; once any rank asked, every rank ends the pass after that batch with
  // kCancelled, so that a signal does not wait for a whole validation pass.
  const std::atomic<bool>* stop_requested = nullptr;
};

// Puts the model in eval mode and runs the loader's epoch 0 through it
// without gradients. kInternal when the model throws, or when the ranks
// together did not count `dataset_size` examples; kCancelled when stopped
// (above); backend and loader errors as they are.
absl::StatusOr<Scores> EvaluateOnRanks(models::Model& model,
                                       data::DataLoader& loader,
                                       int64_t dataset_size,
                                       const backend::SmallCollectives& sync,
                                       const EvaluationOptions& options = {});

// The first `batches` validation batches per rank before training
// (Lightning's num_sanity_val_steps), so that a broken split or model fails in
// seconds instead of after the first epoch. Rank 0's line describing the
// check, or EvaluateOnRanks' error saying it came from the check.
absl::StatusOr<std::string> SanityCheck(models::Model& model,
                                        data::DataLoader& loader,
                                        const backend::SmallCollectives& sync,
                                        int64_t batches);

}  // namespace dtrain::trainer

#endif  // DTRAIN_TRAINER_EVALUATION_H_
