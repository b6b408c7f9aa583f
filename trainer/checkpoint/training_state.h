// What a checkpoint holds besides tensors: where a run stands (epoch, sampler
// position, steps, best accuracy) and what it was (model, optimizer, seed).
// A plain value type.
#ifndef DTRAIN_TRAINER_CHECKPOINT_TRAINING_STATE_H_
#define DTRAIN_TRAINER_CHECKPOINT_TRAINING_STATE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "data/distributed_sampler.h"

namespace dtrain::trainer {

// Everything besides tensors that a resumed run needs.
struct TrainingState {
  int64_t epoch = 0;           // the epoch to continue at
  data::SamplerState sampler;  // the position inside that epoch
  int64_t global_step = 0;     // optimizer steps taken so far
  double best_top1 = 0;        // best validation top-1 so far (percent)
  // E.g. "convnet"; DecodeCheckpoint can reject a checkpoint of another model.
  std::string model_name;
  std::string optimizer_name;  // "sgd" | "adadelta" | "adam" | "adamw"
  uint64_t seed = 0;
  // Free-form JSON of the run's configuration, stored for people; not checked.
  std::string config_json;

  friend bool operator==(const TrainingState& a, const TrainingState& b);
  friend bool operator!=(const TrainingState& a, const TrainingState& b) {
    return !(a == b);
  }
};

// Bounds of a TrainingState's fields, far above any real run and low enough
// that the trainer's arithmetic on them (step counters, seeds derived from
// steps, epoch loops) cannot overflow.
inline constexpr int64_t kMaxCheckpointEpoch = int64_t{1} << 31;
inline constexpr int64_t kMaxCheckpointStep = int64_t{1} << 40;
inline constexpr int64_t kMaxCheckpointDatasetSize = int64_t{1} << 40;
inline constexpr int64_t kMaxCheckpointWorldSize = int64_t{1} << 20;
inline constexpr size_t kMaxCheckpointNameSize = 1024;

// kInvalidArgument naming the first field outside its bounds, its value and
// the bound: epoch and sampler.epoch in [0, kMaxCheckpointEpoch] and equal
// (both writers save the sampler of the epoch they name); global_step in
// [0, kMaxCheckpointStep]; best_top1 a number in [0, 100];
// sampler.dataset_size in [0, kMaxCheckpointDatasetSize];
// sampler.num_replicas in [1, kMaxCheckpointWorldSize]; sampler.start in
// [0, dataset_size]; sampler.position in [0, the partition of that start
// per replica]; model_name and optimizer_name at most
// kMaxCheckpointNameSize bytes.
absl::Status CheckTrainingState(const TrainingState& state);

}  // namespace dtrain::trainer

#endif  // DTRAIN_TRAINER_CHECKPOINT_TRAINING_STATE_H_
