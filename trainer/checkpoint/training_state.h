// What a checkpoint holds besides tensors: where a run stands (epoch, sampler
// position, steps, best accuracy) and what it was (model, optimizer, seed).
// A plain value type.
#ifndef DTRAIN_TRAINER_CHECKPOINT_TRAINING_STATE_H_
#define DTRAIN_TRAINER_CHECKPOINT_TRAINING_STATE_H_

#include <cstdint>
#include <string>

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
  std::string optimizer_name;  // "sgd" | "adadelta"
  uint64_t seed = 0;
  // Free-form JSON of the run's configuration, stored for people; not checked.
  std::string config_json;

  friend bool operator==(const TrainingState& a, const TrainingState& b);
  friend bool operator!=(const TrainingState& a, const TrainingState& b) {
    return !(a == b);
  }
};

}  // namespace dtrain::trainer

#endif  // DTRAIN_TRAINER_CHECKPOINT_TRAINING_STATE_H_
