// Internal to the checkpoint package: the payload of a checkpoint, its
// sections MODL (model tensors), OPTM (optimizer state, through the
// optimizer's codec), STAT (TrainingState) and, from format version 3, HOOK
// (the communication hook's state), written from and read into plain
// structures (docs/FORMATS.md). checkpoint.cc adds the header and loads
// what was read into a model and optimizer. Thread-compatible: the functions
// only read the model and optimizer they are given.
#ifndef DTRAIN_TRAINER_CHECKPOINT_PAYLOAD_H_
#define DTRAIN_TRAINER_CHECKPOINT_PAYLOAD_H_

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/ordered_dict.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "base/byte_codec.h"
#include "trainer/checkpoint/hook_state.h"
#include "trainer/checkpoint/optimizer_codec.h"
#include "trainer/checkpoint/training_state.h"

namespace dtrain::trainer::internal {

// The version written; the oldest one read (without a HOOK section).
inline constexpr uint32_t kFormatVersion = 3;
inline constexpr uint32_t kOldestFormatVersion = 2;

// Defined tensors only: modules may register an undefined one (e.g. a
// Linear without bias), which has nothing to save.
struct NamedTensors {
  std::vector<std::string> names;
  std::vector<at::Tensor> tensors;
};
NamedTensors Collect(const torch::OrderedDict<std::string, at::Tensor>& items);

struct SavedOptimizer {
  const OptimizerCodec* codec = nullptr;
  std::vector<SavedGroup> groups;
};

struct SavedCheckpoint {
  NamedTensors parameters;
  NamedTensors buffers;
  SavedOptimizer optimizer;
  TrainingState state;
  // Empty (no name, no tensors) in a version 2 payload.
  HookState hook;
};

// Appends the four sections of kFormatVersion. kInvalidArgument (with
// kEncodeError's prefix) for what the format cannot hold; throws when a
// tensor cannot be copied to the CPU.
absl::Status WritePayload(const torch::nn::Module& model,
                          const torch::optim::Optimizer& optimizer,
                          const TrainingState& state, const HookState& hook,
                          base::ByteWriter& w);

// The whole payload of format `version` (kOldestFormatVersion to
// kFormatVersion), checked field by field: kDataLoss naming the field and
// its offset for anything WritePayload would not have written. Throws only
// when a tensor cannot be allocated.
absl::Status ReadPayload(absl::string_view payload, uint32_t version,
                         SavedCheckpoint* out);

}  // namespace dtrain::trainer::internal

#endif  // DTRAIN_TRAINER_CHECKPOINT_PAYLOAD_H_
