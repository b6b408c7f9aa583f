#include "trainer/evaluation.h"

#include <ATen/Functions.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <exception>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "base/torch_guard.h"
#include "dist/backend/small_collectives.h"
#include "trainer/report/meters.h"
#include "trainer/stop_vote.h"

namespace dtrain::trainer {
namespace {

// Cross entropy, as TrainStep computes it.
at::Tensor Loss(const at::Tensor& output, const at::Tensor& labels,
                int64_t reduction) {
  return at::cross_entropy_loss(output, labels, {}, reduction);
}

}  // namespace

absl::StatusOr<Scores> EvaluateOnRanks(models::Model& model,
                                       data::DataLoader& loader,
                                       int64_t dataset_size,
                                       const backend::SmallCollectives& sync,
                                       const EvaluationOptions& options) {
  model.eval();
  at::NoGradGuard no_grad;
  loader.SetEpoch(0);
  double loss_sum = 0;
  int64_t correct1 = 0, correct5 = 0, examples = 0;
  // Every rank has as many batches (the sampler pads), so every rank votes
  // as often.
  StopVote vote(sync, options.stop_requested);
  for (int64_t batches = 0;
       options.max_batches <= 0 || batches < options.max_batches; ++batches) {
    DTRAIN_ASSIGN_OR_RETURN(absl::optional<data::Batch> batch, loader.Next());
    if (!batch.has_value()) break;
    // Issued before the forward pass, which hides its round trip.
    vote.Issue();
    const data::Batch& b = *batch;
    // The sampler pads the last round with repeats so that every rank gets as
    // many examples; slots past the dataset's end are those repeats, and are
    // left out so that every example counts exactly once.
    std::vector<int64_t> keep;
    for (int64_t j = 0; j < b.labels.size(0); ++j) {
      if (loader.sampler().GlobalSlot(b.position + j) < dataset_size)
        keep.push_back(j);
    }
    if (!keep.empty()) {
      at::Tensor images = b.images;
      at::Tensor labels = b.labels;
      if (static_cast<int64_t>(keep.size()) < labels.size(0)) {
        const at::Tensor index = at::tensor(keep, at::kLong);
        images = images.index_select(0, index);
        labels = labels.index_select(0, index);
      }
      images = images.to(sync.device(), true);
      labels = labels.to(sync.device(), true);
      at::Tensor output;
      try {
        output = model.forward(images);
      } catch (const std::exception& e) {
        vote.Abandon();
        return absl::InternalError(absl::StrCat("validation forward failed: ",
                                                base::ExceptionMessage(e)));
      }
      loss_sum += Loss(output, labels, at::Reduction::Sum).item<double>();
      const std::vector<int64_t> correct = TopKCorrect(output, labels, {1, 5});
      correct1 += correct[0];
      correct5 += correct[1];
      examples += labels.size(0);
    }
    DTRAIN_ASSIGN_OR_RETURN(const bool stop, vote.Collect());
    if (stop) {
      return absl::CancelledError(absl::StrCat(
          "validation stopped by a signal after ", batches + 1, " batches"));
    }
  }
  DTRAIN_ASSIGN_OR_RETURN(
      const Scores scores,
      ScoresOverRanks(sync, loss_sum, correct1, correct5, examples));
  if (options.max_batches <= 0 &&
      static_cast<int64_t>(scores.examples) != dataset_size) {
    return absl::InternalError(
        absl::StrCat("validation counted ", scores.examples,
                     " examples, expected ", dataset_size));
  }
  return scores;
}

absl::StatusOr<std::string> SanityCheck(models::Model& model,
                                        data::DataLoader& loader,
                                        const backend::SmallCollectives& sync,
                                        int64_t batches) {
  const absl::Time start = absl::Now();
  EvaluationOptions options;
  options.max_batches = batches;
  absl::StatusOr<Scores> scores = EvaluateOnRanks(
      model, loader, loader.sampler().dataset_size(), sync, options);
  if (!scores.ok()) {
    return absl::Status(
        scores.status().code(),
        absl::StrCat("validation sanity check (the first ", batches,
                     " validation batches per rank, before training; "
                     "--num_sanity_val_steps=0 skips it): ",
                     scores.status().message()));
  }
  return absl::StrFormat(
      "validation sanity check: %d batches per rank, %.0f examples, loss "
      "%.4f (%.1f s)",
      batches, scores->examples, scores->loss,
      absl::ToDoubleSeconds(absl::Now() - start));
}

}  // namespace dtrain::trainer
