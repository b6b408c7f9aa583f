// Internal to the checkpoint package: how one optimizer type's group options
// and per-parameter state are written into a checkpoint's OPTM section and
// loaded back (docs/FORMATS.md). One codec per optimizer, each in its own
// file (sgd_codec.cc, adadelta_codec.cc); supporting a new optimizer is a new
// codec plus its line in OptimizerCodecs().
//
// Codecs are stateless and immutable: thread-safe.
#ifndef DTRAIN_TRAINER_CHECKPOINT_OPTIMIZER_CODEC_H_
#define DTRAIN_TRAINER_CHECKPOINT_OPTIMIZER_CODEC_H_

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/byte_codec.h"

namespace dtrain::trainer::internal {

// One parameter's saved optimizer state, as read from a checkpoint.
struct SavedParamState {
  bool present = false;
  int64_t step = 0;
  // Each of the same shape as the parameter (checked before loading).
  std::vector<at::Tensor> tensors;
};

struct SavedGroup {
  // The group's options when the codec restores them (RestoresOptions()).
  std::unique_ptr<torch::optim::OptimizerOptions> options;
  std::vector<SavedParamState> params;
};

class OptimizerCodec {
 public:
  virtual ~OptimizerCodec() = default;

  // The kind byte that opens the OPTM section; unique among codecs.
  virtual uint8_t kind() const = 0;
  // As TrainingState::optimizer_name and messages say it: "sgd".
  virtual absl::string_view name() const = 0;
  // The C++ type, for messages: "torch::optim::SGD".
  virtual absl::string_view type_name() const = 0;
  virtual bool Handles(const torch::optim::Optimizer& optimizer) const = 0;
  // The fewest bytes a group's options take, to cap the group count.
  virtual size_t min_options_size() const = 0;
  // Whether loading replaces the groups' options with the saved ones.
  virtual bool RestoresOptions() const = 0;

  // Appends group `group`'s options; kInvalidArgument (with the writer's
  // prefix) when they are not this optimizer's.
  virtual absl::Status WriteOptions(
      const torch::optim::OptimizerOptions& options, size_t group,
      base::ByteWriter& w) const = 0;
  // Reads what WriteOptions wrote for the group `where` names, validating
  // it; sets out->options when RestoresOptions().
  virtual absl::Status ReadOptions(base::ByteReader& r, absl::string_view where,
                                   SavedGroup* out) const = 0;

  // Appends the has-state byte and, if set, the state. `state` is the
  // parameter's (nullptr when it has none); kInvalidArgument when it is
  // another optimizer's. Throws when a tensor cannot be copied to the CPU.
  virtual absl::Status WriteState(
      const torch::optim::OptimizerParamState* state, absl::string_view what,
      base::ByteWriter& w) const = 0;
  // Reads what WriteState wrote; kDataLoss naming `what` for anything else.
  virtual absl::Status ReadState(base::ByteReader& r, absl::string_view what,
                                 SavedParamState* out) const = 0;
  // The parameter's state as ReadState gives it back (the tensors as they
  // are, not copied), for code that moves state between layouts (ZeRO's
  // shares: sharded_state.h). `state` is nullptr when the parameter has none;
  // kInvalidArgument naming `what` when it is another optimizer's.
  virtual absl::StatusOr<SavedParamState> Extract(
      const torch::optim::OptimizerParamState* state,
      absl::string_view what) const = 0;
  // The optimizer's state for a saved one whose `present` is set, with its
  // tensors converted to `to`. Throws on device errors.
  virtual std::unique_ptr<torch::optim::OptimizerParamState> BuildState(
      const SavedParamState& saved, const at::TensorOptions& to) const = 0;
};

// Every codec, in kind order.
const std::vector<const OptimizerCodec*>& OptimizerCodecs();
// The codec for `optimizer`'s type, or nullptr when none supports it.
const OptimizerCodec* CodecFor(const torch::optim::Optimizer& optimizer);
// The codec of a kind byte, or nullptr.
const OptimizerCodec* CodecOfKind(uint8_t kind);
// "sgd, adadelta, adam and adamw (torch::optim::SGD, ...)", for messages.
std::string SupportedOptimizers();

// Reads the step of a parameter's state (`what` names the parameter), bounded
// as the run's global_step: a step near 2^63 overflows the next optimizer
// step. kDataLoss naming the value and its offset outside [0,
// kMaxCheckpointStep]. For the codecs.
absl::Status ReadOptimizerStep(base::ByteReader& r, absl::string_view what,
                               int64_t* step);

// The codecs, defined in their own files.
const OptimizerCodec& SgdCodec();
const OptimizerCodec& AdadeltaCodec();
const OptimizerCodec& AdamCodec();
const OptimizerCodec& AdamWCodec();

}  // namespace dtrain::trainer::internal

#endif  // DTRAIN_TRAINER_CHECKPOINT_OPTIMIZER_CODEC_H_
