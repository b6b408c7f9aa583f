// What a checkpoint keeps of DDP's communication hook (dist/ddp/comm_hook.h)
// for an exact resume: the hook's name, the named tensors of its State()
// (rank 0's, shared by all ranks) and those of every rank's RankState(). A
// plain value type; the checkpoint package knows no DDP type, the trainer
// copies between the two.
#ifndef DTRAIN_TRAINER_CHECKPOINT_HOOK_STATE_H_
#define DTRAIN_TRAINER_CHECKPOINT_HOOK_STATE_H_

#include <ATen/core/Tensor.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace dtrain::trainer {

struct HookState {
  // CommHook::name(): "allreduce", "local_sgd", ...; "" when the writer had
  // no hook to save (a loop without DDP, or a version 2 file).
  std::string name;
  // CommHook::State(), in its order. EncodeCheckpoint copies the tensors to
  // the CPU; DecodeCheckpoint returns them there.
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  // CommHook::RankState() of every rank of the run that wrote it: ranks[r] is
  // rank r's, each with the same names in the same order. Empty when the
  // hook had no per-rank state (DecodeCheckpoint also returns it empty when
  // every rank's list was). Stored as entries named RankEntryName(r, name).
  std::vector<std::vector<std::pair<std::string, at::Tensor>>> ranks;
};

// The HOOK section's name of rank r's per-rank entry `name`:
// "rank3/powersgd.bucket0.error".
std::string RankEntryName(int rank, absl::string_view name);

// Whether `entry` is a per-rank entry name: "rank<r>/<name>", r a decimal
// without leading zeros below 2^31, `name` not empty and without '/'. Then
// sets `rank` and `name`.
bool ParseRankEntryName(absl::string_view entry, int* rank,
                        absl::string_view* name);

// kInvalidArgument naming the first field a checkpoint reader would refuse:
// a name of more than kMaxCheckpointNameSize bytes (training_state.h), state
// without a name, an entry whose name is empty, holds a '/', is used twice
// or (rank-qualified for per-rank entries) is longer than that bound, a rank
// whose entries' names differ from rank 0's, or an undefined tensor. The
// tensors' dtypes and layouts are EncodeCheckpoint's to check.
absl::Status CheckHookState(const HookState& hook);

}  // namespace dtrain::trainer

#endif  // DTRAIN_TRAINER_CHECKPOINT_HOOK_STATE_H_
