#include "trainer/loop_checkpoints.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
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
  // Nothing there yet: nothing to load.
  if (absl::IsNotFound(found)) found = absl::OkStatus();
  bool loaded = false;
  DTRAIN_ASSIGN_OR_RETURN(
      TrainingState state,
      RestoreFromRankZero(*backend_, options_, std::move(bytes), found, model,
                          optimizer, loader, hook, &loaded));
  if (!loaded) return state;
  resumed_ = true;
  resumed_from_ = std::move(path);
  return state;
}

absl::StatusOr<TrainingState> RestoreFromRankZero(
    backend::Backend& backend, const LoopCheckpointOptions& options,
    std::string bytes, const absl::Status& error, torch::nn::Module& model,
    torch::optim::Optimizer& optimizer, data::DataLoader* loader,
    HookState* hook, bool* loaded) {
  if (hook != nullptr) *hook = HookState();
  if (loaded != nullptr) *loaded = false;
  // Rank 0 sends the checkpoint, nothing, or its error, which every rank
  // then fails with. A checkpoint is never empty.
  const backend::SmallCollectives sync(backend, options.device,
                                       options.timeout);
  if (backend.rank() != 0) bytes.clear();
  DTRAIN_RETURN_IF_ERROR(sync.Broadcast(0, &bytes, error));
  return RestoreFromBytes(options, bytes, model, optimizer, loader, hook,
                          loaded);
}

absl::StatusOr<TrainingState> RestoreFromBytes(
    const LoopCheckpointOptions& options, const std::string& bytes,
    torch::nn::Module& model, torch::optim::Optimizer& optimizer,
    data::DataLoader* loader, HookState* hook, bool* loaded) {
  if (hook != nullptr) *hook = HookState();
  if (loaded != nullptr) *loaded = false;
  if (bytes.empty()) return TrainingState();
  DTRAIN_ASSIGN_OR_RETURN(
      TrainingState state,
      DecodeCheckpoint(bytes, model, optimizer, options.model_name,
                       options.optimizer_name, hook));
  if (loader != nullptr) DTRAIN_RETURN_IF_ERROR(loader->Restore(state.sampler));
  if (loaded != nullptr) *loaded = true;
  return state;
}

absl::Status LoopCheckpoints::GatherRankState(
    const std::vector<std::pair<std::string, at::Tensor>>& mine,
    HookState* hook) const {
  const int rank = backend_->rank();
  const int world = backend_->size();
  const backend::SmallCollectives sync(
      *backend_, options_.device, options_.timeout,
      absl::StrCat("[rank ", rank, "] checkpoint: "),
      "LoopCheckpointOptions::timeout");
  hook->ranks.clear();
  // The layout (count, bytes, a fingerprint of names, dtypes and shapes)
  // checked alike on every rank first: the chunks below are sized by it, and
  // ranks that disagreed would otherwise wait for each other or mix entries.
  uint64_t fingerprint = 1469598103934665603ull;  // FNV-1a
  auto mix = [&](absl::string_view bytes) {
    for (unsigned char c : bytes) {
      fingerprint ^= c;
      fingerprint *= 1099511628211ull;
    }
  };
  int64_t total_bytes = 0;
  std::vector<at::Tensor> local;
  for (const auto& [name, tensor] : mine) {
    mix(name);
    mix(absl::StrCat(":", c10::toString(tensor.scalar_type()), "[",
                     absl::StrJoin(tensor.sizes(), ","), "];"));
    local.push_back(tensor.cpu().contiguous());
    total_bytes += local.back().nbytes();
  }
  // Exact in float64: 52 bits of the fingerprint.
  const double print = static_cast<double>(fingerprint >> 12);
  const double count = static_cast<double>(mine.size());
  const double bytes = static_cast<double>(total_bytes);
  DTRAIN_ASSIGN_OR_RETURN(
      std::vector<double> max,
      sync.AllReduce({count, bytes, print, -count, -bytes, -print},
                     backend::ReduceOp::kMax));
  if (max[0] != -max[3] || max[1] != -max[4] || max[2] != -max[5]) {
    return absl::InternalError(absl::StrCat(
        sync.prefix(),
        "the ranks' per-rank communication hook states differ (entries ",
        -max[3], " to ", max[0], ", bytes ", -max[4], " to ", max[1],
        ", names, dtypes or shapes differ: ", max[2] != -max[5] ? "yes" : "no",
        "); a hook's RankState must have the same layout on every rank"));
  }
  if (mine.empty()) return absl::OkStatus();

  std::vector<std::vector<std::pair<std::string, at::Tensor>>> out;
  if (rank == 0) {
    out.resize(world);
    for (int r = 0; r < world; ++r) {
      for (size_t i = 0; i < mine.size(); ++i) {
        out[r].emplace_back(mine[i].first, r == 0 ? local[i].clone()
                                                  : at::empty_like(local[i]));
      }
    }
  }
  // Chunk by chunk as int32 words: sums over zeros keep every bit (a float
  // sum would turn -0.0 into +0.0) whatever the entry's dtype.
  for (size_t i = 0; i < local.size(); ++i) {
    const auto* src = static_cast<const char*>(local[i].data_ptr());
    const int64_t size = static_cast<int64_t>(local[i].nbytes());
    for (int64_t at = 0; at < size; at += kRankStateChunkBytes) {
      const int64_t n = std::min(kRankStateChunkBytes, size - at);
      at::Tensor words = at::zeros({(n + 3) / 4}, at::kInt);
      std::memcpy(words.data_ptr(), src + at, n);
      at::Tensor rows;
      const std::string what =
          absl::StrCat("gathering the per-rank hook state ", mine[i].first,
                       " (bytes ", at, " to ", at + n, ")");
      const absl::Time started = absl::Now();
      std::shared_ptr<backend::Work> work =
          sync.GatherBySum(words, options_.device, &rows, what);
      DTRAIN_RETURN_IF_ERROR(sync.WaitForResult(*work, what, started));
      if (rank != 0) continue;
      rows = rows.cpu().contiguous();
      for (int r = 1; r < world; ++r) {
        std::memcpy(static_cast<char*>(out[r][i].second.data_ptr()) + at,
                    rows[r].data_ptr(), n);
      }
    }
  }
  hook->ranks = std::move(out);
  return absl::OkStatus();
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
