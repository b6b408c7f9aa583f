// Checkpoints for a training loop of one's own, the way the trainer keeps
// them: rank 0 owns the checkpoint directory (trainer/checkpoint/), and
// resuming reads the newest valid checkpoint there and broadcasts its bytes,
// so that the other ranks need no shared filesystem. Every rank then restores
// the model, the optimizer and, if given, the loader's position and the state
// of DDP's communication hook.
//
//   DTRAIN_ASSIGN_OR_RETURN(LoopCheckpoints checkpoints,
//                           LoopCheckpoints::Open("ckpt", *backend));
//   DTRAIN_ASSIGN_OR_RETURN(TrainingState state,
//                           checkpoints.Resume(*model, optimizer, loader.get()));
//   ... train from state.epoch, state.global_step ...
//   DTRAIN_RETURN_IF_ERROR(
//       checkpoints.Save(*model, optimizer, step, *loader).status());
//
// With a DDP communication hook that keeps state (dist/ddp/comm_hook.h),
// pass Save a HookState of its name() and State(), with every rank's
// RankState() added by GatherRankState, and give Resume a HookState to fill
// for the hook's LoadState and, when the world size is the writer's, each
// rank's LoadRankState of hook.ranks[rank]: the checkpoint package holds no
// DDP type, so the copying is the caller's.
//
//   HookState hook;  // on every rank, at every checkpoint:
//   DTRAIN_RETURN_IF_ERROR(checkpoints.GatherRankState(
//       ddp->comm_hook().RankState(), &hook));
//   hook.name = ddp->comm_hook().name();
//   hook.tensors = ddp->comm_hook().State();
//   ... checkpoints.Save(..., hook) ...
//
// The optimizer must be one the checkpoint format knows (SGD, optim::Adadelta;
// trainer/checkpoint/checkpoint.h). //trainer:train keeps its checkpoints
// through this class too, with the names checked and the best model saved.
//
// Thread safety: thread-compatible. Lifetimes: the backend must outlive the
// object.
#ifndef DTRAIN_TRAINER_LOOP_CHECKPOINTS_H_
#define DTRAIN_TRAINER_LOOP_CHECKPOINTS_H_

#include <c10/core/Device.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/optional.h"
#include "data/loader.h"
#include "dist/backend/backend.h"
#include "trainer/checkpoint/checkpoint_dir.h"
#include "trainer/checkpoint/hook_state.h"
#include "trainer/checkpoint/training_state.h"

namespace dtrain::trainer {

struct LoopCheckpointOptions {
  // Checkpoint files Save keeps (CheckpointDir's `keep`), >= 1.
  int keep = 2;
  // Where the backend's collectives run: the CPU for Gloo, the rank's CUDA
  // device for NCCL.
  c10::Device device = c10::kCPU;
  // Bounds the collectives of Resume and GatherRankState.
  absl::Duration timeout = absl::Minutes(5);
  // What Resume requires of a checkpoint's model_name and optimizer_name
  // (DecodeCheckpoint's expectations); "" accepts any.
  std::string model_name;
  std::string optimizer_name;
};

class LoopCheckpoints {
 public:
  // Not collective. Rank 0 opens `dir`, creating it if needed
  // (CheckpointDir::Open's errors); the other ranks never touch it.
  // kInvalidArgument for an empty `dir` on every rank.
  static absl::StatusOr<LoopCheckpoints> Open(
      std::string dir, backend::Backend& backend,
      const LoopCheckpointOptions& options = {});

  // Collective. Loads the newest valid checkpoint into `model` and
  // `optimizer` on every rank (DecodeCheckpoint, all or nothing) and, when
  // `loader` is not null, continues its epoch where the checkpoint stopped
  // (DataLoader::Restore). Returns the checkpoint's TrainingState, or a
  // default one (epoch 0, step 0) when the directory has no checkpoint;
  // resumed() and resumed_from() then say whether and from which file. When
  // `hook` is not null it receives the checkpoint's hook state (CPU tensors;
  // empty when there is no checkpoint or it has none), on every rank.
  // Every rank fails alike when rank 0 cannot read the directory or finds
  // only damaged files (kDataLoss listing them; on the other ranks the same
  // after "rank 0: "); a checkpoint that does not fit the model, or names
  // another model or optimizer than the options expect, fails with
  // DecodeCheckpoint's error.
  absl::StatusOr<TrainingState> Resume(torch::nn::Module& model,
                                       torch::optim::Optimizer& optimizer,
                                       data::DataLoader* loader = nullptr,
                                       HookState* hook = nullptr);

  // Not collective. Rank 0 writes checkpoint-<state.global_step>.dtc with
  // `state` and `hook` (CheckpointDir::Save: atomically, then rotation) and
  // returns its path; the other ranks return "" at once. With `also_best`,
  // the same bytes also
  // go to best.dtc (CheckpointDir::SaveBest). Lines about files rotation left
  // alone are appended to `warnings` when given. EncodeCheckpoint's errors
  // (among them a state that CheckTrainingState refuses: state.epoch must
  // equal state.sampler.epoch) and the directory's.
  absl::StatusOr<std::string> Save(
      const torch::nn::Module& model, const torch::optim::Optimizer& optimizer,
      const TrainingState& state, const HookState& hook = {},
      bool also_best = false, std::vector<std::string>* warnings = nullptr);

  // Collective: every rank calls it before each Save that is to carry
  // per-rank hook state, in the same order as its other collectives, with
  // `mine` (CommHook::RankState()) of the same names, shapes and dtypes on
  // every rank. Rank 0's hook->ranks receives every rank's entries (CPU
  // tensors, bit for bit); on the other ranks it is cleared. With no entries
  // it costs one small allreduce. Memory: besides rank 0's result, every
  // rank holds at most world size x kRankStateChunkBytes at a time (the
  // entries go chunk by chunk, as sums over zeros: SmallCollectives::
  // GatherBySum). kInternal on every rank alike when the ranks' entries
  // differ in number, names, shapes or dtypes; the backend's errors.
  absl::Status GatherRankState(
      const std::vector<std::pair<std::string, at::Tensor>>& mine,
      HookState* hook) const;
  static constexpr int64_t kRankStateChunkBytes = int64_t{4} << 20;

  // Save for a loop that has taken `global_step` optimizer steps and reads
  // its data from `loader`: the state holds the step and the loader's
  // position (DataLoader::state(): its epoch and the examples consumed).
  absl::StatusOr<std::string> Save(const torch::nn::Module& model,
                                   const torch::optim::Optimizer& optimizer,
                                   int64_t global_step,
                                   const data::DataLoader& loader,
                                   const HookState& hook = {});

  // Whether the last Resume loaded a checkpoint (every rank alike).
  bool resumed() const { return resumed_; }
  // The file the last Resume loaded, on rank 0 ("" elsewhere or when none).
  const std::string& resumed_from() const { return resumed_from_; }
  // Rank 0: "<path>: <reason>" for each newer file the last Resume passed
  // over as damaged, newest first (CheckpointDir::Found::skipped).
  const std::vector<std::string>& skipped() const { return skipped_; }
  const std::string& path() const { return path_; }

 private:
  LoopCheckpoints(std::string path, absl::optional<CheckpointDir> dir,
                  backend::Backend& backend,
                  const LoopCheckpointOptions& options)
      : path_(std::move(path)),
        dir_(std::move(dir)),
        backend_(&backend),
        options_(options) {}

  std::string path_;
  // Rank 0 only.
  absl::optional<CheckpointDir> dir_;
  backend::Backend* backend_;
  LoopCheckpointOptions options_;
  bool resumed_ = false;
  std::string resumed_from_;
  std::vector<std::string> skipped_;
};

// Not collective: decodes checkpoint `bytes` into `model` and `optimizer`
// (DecodeCheckpoint, with the options' expected names); the loader (when not
// null) continues where the checkpoint stopped, and `hook` (when not null)
// receives its hook state. Empty bytes load nothing and return a default
// TrainingState; `*loaded` (when not null) says whether anything was loaded.
absl::StatusOr<TrainingState> RestoreFromBytes(
    const LoopCheckpointOptions& options, const std::string& bytes,
    torch::nn::Module& model, torch::optim::Optimizer& optimizer,
    data::DataLoader* loader = nullptr, HookState* hook = nullptr,
    bool* loaded = nullptr);

// Collective: Resume's second half, for a checkpoint that rank 0 holds in
// memory (an elastic run's next generation starts from its rank 0's state).
// Rank 0's `bytes` (ignored on the other ranks) and `error` go to every rank:
// an error fails every rank alike. Every rank then restores them as
// RestoreFromBytes does.
absl::StatusOr<TrainingState> RestoreFromRankZero(
    backend::Backend& backend, const LoopCheckpointOptions& options,
    std::string bytes, const absl::Status& error, torch::nn::Module& model,
    torch::optim::Optimizer& optimizer, data::DataLoader* loader = nullptr,
    HookState* hook = nullptr, bool* loaded = nullptr);

}  // namespace dtrain::trainer

#endif  // DTRAIN_TRAINER_LOOP_CHECKPOINTS_H_
