#include "trainer/loop_checkpoints.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "dist/backend/small_collectives.h"
#include "trainer/checkpoint/checkpoint.h"

namespace dtrain::trainer {

absl::StatusOr<LoopCheckpoints> LoopCheckpoints::Open(
    std::string dir, backend::Backend& backend,
    const LoopCheckpointOptions& options) {
  if (dir.empty()) {
    return absl::InvalidArgumentError("checkpoint directory: empty path");
  }
  absl::optional<CheckpointDir> opened;
  if (backend.rank() == 0) {
    DTRAIN_ASSIGN_OR_RETURN(opened, CheckpointDir::Open(dir, options.keep));
  }
  return LoopCheckpoints(std::move(dir), std::move(opened), backend, options);
}

absl::StatusOr<TrainingState> LoopCheckpoints::Resume(
    torch::nn::Module& model, torch::optim::Optimizer& optimizer,
    data::DataLoader* loader, HookState* hook) {
  if (hook != nullptr) *hook = HookState();
  resumed_ = false;
  resumed_from_.clear();
  skipped_.clear();
  std::string bytes;
  absl::Status found = absl::OkStatus();
  std::string path;
  if (dir_.has_value()) {
    absl::StatusOr<CheckpointDir::Found> latest = dir_->Latest();
    if (latest.ok()) {
      bytes = std::move(latest->bytes);
      path = std::move(latest->path);
      skipped_ = std::move(latest->skipped);
    } else {
      found = latest.status();
    }
  }
  // Rank 0 sends the checkpoint, nothing (no checkpoint yet) or its error,
  // which every rank then fails with. A checkpoint is never empty.
  if (absl::IsNotFound(found)) found = absl::OkStatus();
  const backend::SmallCollectives sync(*backend_, options_.device,
                                       options_.timeout);
  DTRAIN_RETURN_IF_ERROR(sync.Broadcast(0, &bytes, found));
  if (bytes.empty()) return TrainingState();
  DTRAIN_ASSIGN_OR_RETURN(
      TrainingState state,
      DecodeCheckpoint(bytes, model, optimizer, options_.model_name,
                       options_.optimizer_name, hook));
  if (loader != nullptr) DTRAIN_RETURN_IF_ERROR(loader->Restore(state.sampler));
  resumed_ = true;
  resumed_from_ = std::move(path);
  return state;
}

absl::StatusOr<std::string> LoopCheckpoints::Save(
    const torch::nn::Module& model, const torch::optim::Optimizer& optimizer,
    const TrainingState& state, const HookState& hook, bool also_best,
    std::vector<std::string>* warnings) {
  if (!dir_.has_value()) return std::string();
  DTRAIN_ASSIGN_OR_RETURN(std::string bytes,
                          EncodeCheckpoint(model, optimizer, state, hook));
  DTRAIN_ASSIGN_OR_RETURN(std::string path,
                          dir_->Save(state.global_step, bytes, warnings));
  if (also_best) DTRAIN_RETURN_IF_ERROR(dir_->SaveBest(bytes).status());
  return path;
}

absl::StatusOr<std::string> LoopCheckpoints::Save(
    const torch::nn::Module& model, const torch::optim::Optimizer& optimizer,
    int64_t global_step, const data::DataLoader& loader,
    const HookState& hook) {
  TrainingState state;
  state.global_step = global_step;
  state.sampler = loader.state();
  state.epoch = state.sampler.epoch;
  return Save(model, optimizer, state, hook);
}

}  // namespace dtrain::trainer
