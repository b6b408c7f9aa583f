#include "trainer/checkpoint/training_state.h"

namespace dtrain::trainer {

bool operator==(const TrainingState& a, const TrainingState& b) {
  return a.epoch == b.epoch && a.sampler == b.sampler &&
         a.global_step == b.global_step && a.best_top1 == b.best_top1 &&
         a.model_name == b.model_name && a.optimizer_name == b.optimizer_name &&
         a.seed == b.seed && a.config_json == b.config_json;
}

}  // namespace dtrain::trainer
