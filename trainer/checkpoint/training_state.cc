#include "trainer/checkpoint/training_state.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace dtrain::trainer {
namespace {

absl::Status OutOfRange(absl::string_view field, double value, double low,
                        double high, absl::string_view why = "") {
  return absl::InvalidArgumentError(absl::StrCat(
      field, " is ", value, ", outside [", low, ", ", high, "]", why));
}

absl::Status CheckRange(absl::string_view field, int64_t value, int64_t low,
                        int64_t high, absl::string_view why = "") {
  if (value >= low && value <= high) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      field, " is ", value, ", outside [", low, ", ", high, "]", why));
}

}  // namespace

absl::Status CheckTrainingState(const TrainingState& s) {
  if (absl::Status st = CheckRange("epoch", s.epoch, 0, kMaxCheckpointEpoch);
      !st.ok())
    return st;
  if (s.sampler.epoch != s.epoch) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampler epoch is ", s.sampler.epoch,
                     ", not the checkpoint's epoch ", s.epoch));
  }
  if (absl::Status st =
          CheckRange("global_step", s.global_step, 0, kMaxCheckpointStep);
      !st.ok())
    return st;
  if (!(s.best_top1 >= 0 && s.best_top1 <= 100)) {  // NaN fails too.
    return OutOfRange("best_top1", s.best_top1, 0, 100, " (a percentage)");
  }
  const data::SamplerState& p = s.sampler;
  if (absl::Status st = CheckRange("sampler dataset_size", p.dataset_size, 0,
                                   kMaxCheckpointDatasetSize);
      !st.ok())
    return st;
  if (absl::Status st = CheckRange("sampler num_replicas", p.num_replicas, 1,
                                   kMaxCheckpointWorldSize);
      !st.ok())
    return st;
  if (absl::Status st = CheckRange("sampler start", p.start, 0, p.dataset_size,
                                   " (the dataset_size)");
      !st.ok())
    return st;
  // The samples per replica in the partition that starts at `start`.
  const int64_t left = p.dataset_size - p.start;
  const int64_t per_replica =
      p.drop_last ? left / p.num_replicas
                  : (left + p.num_replicas - 1) / p.num_replicas;
  if (absl::Status st =
          CheckRange("sampler position", p.position, 0, per_replica,
                     " (the samples per replica of its epoch)");
      !st.ok())
    return st;
  if (s.model_name.size() > kMaxCheckpointNameSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("model_name has ", s.model_name.size(),
                     " bytes, more than ", kMaxCheckpointNameSize));
  }
  if (s.optimizer_name.size() > kMaxCheckpointNameSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer_name has ", s.optimizer_name.size(),
                     " bytes, more than ", kMaxCheckpointNameSize));
  }
  return absl::OkStatus();
}

bool operator==(const TrainingState& a, const TrainingState& b) {
  return a.epoch == b.epoch && a.sampler == b.sampler &&
         a.global_step == b.global_step && a.best_top1 == b.best_top1 &&
         a.model_name == b.model_name && a.optimizer_name == b.optimizer_name &&
         a.seed == b.seed && a.config_json == b.config_json;
}

}  // namespace dtrain::trainer
