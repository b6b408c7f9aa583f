#include "trainer/run_outputs.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "models/state_dict/state_dict.h"
#include "trainer/checkpoint/hook_state.h"
#include "trainer/checkpoint/sharded_state.h"

namespace dtrain::trainer {

absl::Status RunOutputs::Checkpoint(const data::SamplerState& sampler,
                                    int64_t global_step, double best_top1,
                                    bool best, bool together) {
  if (!p_.checkpoints.has_value()) return absl::OkStatus();
  DTRAIN_RETURN_IF_ERROR(ConfirmLastStep(global_step));
  // Every rank's per-rank hook state (read after ConfirmLastStep: that of
  // the finished step) to rank 0: the one collective a checkpoint adds.
  // Without gradient sync the ranks do not step in lockstep, and the hook
  // never runs.
  HookState hook;
  if (o_.parallel.sync_gradients && together) {
    DTRAIN_RETURN_IF_ERROR(p_.checkpoints->GatherRankState(
        p_.ddp->comm_hook().RankState(), &hook));
  }
  if (p_.zero != nullptr) {
    // Every rank's shares of the optimizer state into rank 0's unsharded
    // optimizer, which the checkpoint holds as a run without ZeRO's.
    if (!together) {
      return absl::InternalError(
          "a checkpoint of ZeRO's state needs every rank at the same step");
    }
    DTRAIN_RETURN_IF_ERROR(
        GatherShardedState(*p_.zero, rank0_ ? p_.optimizer.get() : nullptr));
  }
  if (!rank0_) return absl::OkStatus();
  if (!together && !p_.ddp->comm_hook().RankState().empty()) {
    p_.recorder->Say(absl::StrCat(
        "the checkpoint at step ", global_step, " has no per-rank state of ",
        p_.ddp->comm_hook().name(),
        " (ranks step unevenly inside this epoch): a resume from it starts "
        "that state fresh"));
  }
  TrainingState state;
  state.epoch = sampler.epoch;
  state.sampler = sampler;
  state.global_step = global_step;
  state.best_top1 = best_top1;
  state.model_name = o_.model.name;
  state.optimizer_name = *o_.optim.optimizer;
  state.seed = o_.seed;
  // Read after ConfirmLastStep: the hook's state of the finished step.
  hook.name = p_.ddp->comm_hook().name();
  hook.tensors = p_.ddp->comm_hook().State();
  std::vector<std::string> warnings;
  const absl::Status saved =
      p_.checkpoints
          ->Save(*p_.model, *p_.optimizer, state, hook, best, &warnings)
          .status();
  // Rank 0 holds the whole state only while it writes it.
  if (p_.zero != nullptr) p_.optimizer->state().clear();
  DTRAIN_RETURN_IF_ERROR(saved);
  for (const std::string& warning : warnings) p_.recorder->Say(warning);
  if (o_.checkpoint.state_dict_with_checkpoints) return StateDict(global_step);
  return absl::OkStatus();
}

absl::Status RunOutputs::StateDict(int64_t global_step) {
  if (!rank0_ || o_.checkpoint.save_state_dict.empty()) return absl::OkStatus();
  DTRAIN_RETURN_IF_ERROR(ConfirmLastStep(global_step));
  if (absl::Status s = models::state_dict::SaveStateDict(
          *p_.model, o_.checkpoint.save_state_dict);
      !s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat("--save_state_dict: ", s.message()));
  }
  p_.recorder->Say(absl::StrCat("state_dict written to ",
                                o_.checkpoint.save_state_dict, " at step ",
                                global_step));
  return absl::OkStatus();
}

absl::Status RunOutputs::ConfirmLastStep(int64_t global_step) {
  absl::Status s = p_.ddp->ConfirmLastStep();
  if (s.ok()) return s;
  return absl::Status(
      s.code(), absl::StrCat("nothing saved at step ", global_step,
                             ": its gradient averaging failed: ", s.message()));
}

}  // namespace dtrain::trainer
