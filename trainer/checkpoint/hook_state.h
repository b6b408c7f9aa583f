// What a checkpoint keeps of DDP's communication hook (dist/ddp/comm_hook.h)
// for an exact resume: the hook's name and the named tensors of its State().
// A plain value type; the checkpoint package knows no DDP type, the trainer
// copies between the two.
#ifndef DTRAIN_TRAINER_CHECKPOINT_HOOK_STATE_H_
#define DTRAIN_TRAINER_CHECKPOINT_HOOK_STATE_H_

#include <ATen/core/Tensor.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace dtrain::trainer {

struct HookState {
  // CommHook::name(): "allreduce", "local_sgd", ...; "" when the writer had
  // no hook to save (a loop without DDP, or a version 2 file).
  std::string name;
  // CommHook::State(), in its order. EncodeCheckpoint copies the tensors to
  // the CPU; DecodeCheckpoint returns them there.
  std::vector<std::pair<std::string, at::Tensor>> tensors;
};

// kInvalidArgument naming the first field a checkpoint reader would refuse:
// a name of more than kMaxCheckpointNameSize bytes (training_state.h), state
// without a name, an entry whose name is empty, longer than that bound or
// used twice, or an undefined tensor. The tensors' dtypes and layouts are
// EncodeCheckpoint's to check.
absl::Status CheckHookState(const HookState& hook);

}  // namespace dtrain::trainer

#endif  // DTRAIN_TRAINER_CHECKPOINT_HOOK_STATE_H_
