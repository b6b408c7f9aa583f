#include "trainer/loop_checkpoints.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "trainer/checkpoint/checkpoint.h"
#include "trainer/rank_sync.h"

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
    data::DataLoader* loader) {
  resumed_from_.clear();
  std::string bytes;
  absl::Status found = absl::OkStatus();
  std::string path;
  if (dir_.has_value()) {
    absl::StatusOr<CheckpointDir::Found> latest = dir_->Latest();
    if (latest.ok()) {
      bytes = std::move(latest->bytes);
      path = std::move(latest->path);
    } else {
      found = latest.status();
    }
  }
  // Rank 0 sends the checkpoint, nothing (no checkpoint yet) or its error,
  // which every rank then fails with. A checkpoint is never empty.
  if (absl::IsNotFound(found)) found = absl::OkStatus();
  DTRAIN_RETURN_IF_ERROR(BroadcastBytes(*backend_, 0, &bytes, found,
                                        options_.device, options_.timeout));
  if (bytes.empty()) return TrainingState();
  DTRAIN_ASSIGN_OR_RETURN(TrainingState state,
                          DecodeCheckpoint(bytes, model, optimizer));
  if (loader != nullptr) DTRAIN_RETURN_IF_ERROR(loader->Restore(state.sampler));
  resumed_from_ = std::move(path);
  return state;
}

absl::StatusOr<std::string> LoopCheckpoints::Save(
    const torch::nn::Module& model, const torch::optim::Optimizer& optimizer,
    const TrainingState& state) {
  if (!dir_.has_value()) return std::string();
  DTRAIN_ASSIGN_OR_RETURN(std::string bytes,
                          EncodeCheckpoint(model, optimizer, state));
  return dir_->Save(state.global_step, bytes);
}

absl::StatusOr<std::string> LoopCheckpoints::Save(
    const torch::nn::Module& model, const torch::optim::Optimizer& optimizer,
    int64_t global_step, const data::DataLoader& loader) {
  TrainingState state;
  state.global_step = global_step;
  state.sampler = loader.state();
  state.epoch = state.sampler.epoch;
  return Save(model, optimizer, state);
}

}  // namespace dtrain::trainer
