// Trainer checkpoints: the model's parameters and buffers, the optimizer's
// state and the TrainingState of a run, in one self-validating byte string.
// Rank 0 encodes and writes them; to resume, rank 0 picks the newest valid
// file, broadcasts its bytes, and every rank decodes them into its own model
// and optimizer. Hence the API works on byte strings, plus file helpers.
//
// Format (version 2), little-endian throughout:
//
//   "DTRAINCK"        8 bytes, magic
//   version           uint32, 2
//   payload length    uint64
//   payload CRC-32    uint32 (zlib's crc32)
//   payload           three sections, each a 4-byte tag, a uint64 length and
//                     that many bytes, in this order and nothing after:
//     "MODL"  uint32 count, then per tensor (parameters, then buffers, as
//             named_parameters() and named_buffers() list them):
//               name (string), kind (uint8: 0 parameter, 1 buffer), tensor
//     "OPTM"  kind (uint8: 1 torch::optim::SGD, 2 models::Adadelta),
//             uint32 group count, then per parameter group:
//               options: SGD lr, momentum, dampening, weight_decay (float64)
//                        and nesterov (bool); Adadelta lr, rho, eps,
//                        weight_decay (float64) and maximize (bool)
//               uint32 parameter count, then per parameter, in the group's
//               order: has-state (bool), and if set, SGD: momentum_buffer
//               (tensor); Adadelta: step (int64), square_avg, acc_delta
//               (tensors)
//     "STAT"  the TrainingState: epoch (int64), sampler (string, as
//             SamplerState::Serialize writes it), global_step (int64),
//             best_top1 (float64), model_name, optimizer_name (strings),
//             seed (uint64), config_json (string)
//   where a string is a uint32 length and that many bytes; a bool a uint8,
//   0 or 1; a float64 its IEEE-754 bits; and a tensor: dtype (uint8: 1
//   float32, 2 float64, 3 float16, 4 bfloat16, 5 int64, 6 int32, 7 uint8,
//   8 int8, 9 int16, 10 bool), ndim (uint8, at most 8), the sizes (int64
//   each, >= 0), then numel * element size bytes of contiguous data.
//
// The header is checked first, so a truncated or corrupted file is reported
// as such. The payload is then read by bounds-checked code only: every
// length is checked against the bytes left before use, every count against
// what those bytes could hold, so a file with a valid header and a hostile
// payload is rejected (kDataLoss) without a large allocation or a crash.
// Version 1 (a LibTorch archive, whose reader could crash on damaged input)
// is rejected.
//
// Thread safety: the functions and CheckpointDir are thread-compatible. A
// directory has one writer (rank 0); readers may run concurrently with it
// because files only appear by rename.
#ifndef DTRAIN_TRAINER_CHECKPOINT_H_
#define DTRAIN_TRAINER_CHECKPOINT_H_

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "data/distributed_sampler.h"

namespace dtrain::trainer {

// Everything besides tensors that a resumed run needs.
struct TrainingState {
  int64_t epoch = 0;           // the epoch to continue at
  data::SamplerState sampler;  // the position inside that epoch
  int64_t global_step = 0;     // optimizer steps taken so far
  double best_top1 = 0;        // best validation top-1 so far (percent)
  // E.g. "convnet"; DecodeCheckpoint can reject a checkpoint of another model.
  std::string model_name;
  std::string optimizer_name;  // "sgd" | "adadelta"
  uint64_t seed = 0;
  // Free-form JSON of the run's configuration, stored for people; not checked.
  std::string config_json;

  friend bool operator==(const TrainingState& a, const TrainingState& b);
  friend bool operator!=(const TrainingState& a, const TrainingState& b) {
    return !(a == b);
  }
};

// Size of the header that precedes the payload.
inline constexpr size_t kCheckpointHeaderSize = 24;

// Serializes the model's parameters and buffers (by name, as
// named_parameters() and named_buffers() list them), the optimizer's group
// options and per-parameter state, and `state`. The optimizer must be a
// torch::optim::SGD or a models::Adadelta: kInvalidArgument ("checkpoints
// support sgd and adadelta ...") for another, and kInvalidArgument naming the
// tensor for one of a dtype outside the format's list, not dense, or of more
// than 8 dimensions. kInternal with LibTorch's message when copying a tensor
// to the CPU fails. The model and optimizer are only read.
absl::StatusOr<std::string> EncodeCheckpoint(
    const torch::nn::Module& model, const torch::optim::Optimizer& optimizer,
    const TrainingState& state);

// Only the header checks: magic, version, payload length and CRC-32. For
// choosing a file before broadcasting it. kInvalidArgument for bytes that are
// not a checkpoint ("not a dtrain checkpoint (magic ...)") or of another
// format version ("checkpoint format version 1 is no longer read; ...",
// "unsupported checkpoint format version N ..."); kDataLoss for a truncated
// ("truncated: header says N payload bytes, found M") or corrupted ("checksum
// mismatch ...") one.
absl::Status ValidateCheckpointBytes(absl::string_view bytes);

// Loads a checkpoint into `model` and `optimizer`, all or nothing, and
// returns its TrainingState. In order:
//  1. the header checks of ValidateCheckpointBytes;
//  2. kDataLoss ("malformed checkpoint payload: ...", naming the field and
//     its offset in the payload) unless the whole payload is what
//     EncodeCheckpoint writes;
//  3. kFailedPrecondition when the checkpoint's model_name differs from
//     `expected_model_name` or its optimizer_name from
//     `expected_optimizer_name` (an empty expectation accepts any);
//  4. kFailedPrecondition naming the first mismatch unless the checkpoint's
//     parameters and buffers have exactly the model's names, shapes and
//     dtypes;
//  5. kFailedPrecondition ("the checkpoint's optimizer state does not fit
//     the optimizer: ...") unless the optimizer is of the checkpoint's type
//     (SGD or Adadelta) with as many parameter groups, as many parameters in
//     each, and saved state of each parameter's shape. State is matched to
//     parameters by position (group, then parameter), so the optimizer's
//     parameters must be the model's in the order they had when the
//     checkpoint was written (model.parameters() for the trainer's);
//  6. the optimizer's state is replaced by the checkpoint's (as PyTorch's
//     load_state_dict: state of parameters without state in the checkpoint
//     is dropped). Adadelta's group options (lr, rho, eps, weight_decay,
//     maximize) are restored too; SGD keeps its own options, as LibTorch
//     1.13's SGD::load did (the checkpoint holds them for people and tools).
//     Re-apply the learning-rate schedule after loading;
//  7. the tensors are copied into the model.
// Steps 1 to 5 change nothing. Before step 6, every tensor is moved to where
// it goes: model tensors to the device of the model tensor they replace
// (for a model on one device, that of its first parameter), optimizer state
// to its parameter's device and, for a floating-point parameter, its dtype.
// So a checkpoint written from cuda:0 loads on a rank using cuda:1, and
// nothing is changed when that fails (kInternal). A failure in step 7 (a
// copy between tensors on one device) is kInternal too, with the optimizer
// restored but the model possibly partly loaded.
absl::StatusOr<TrainingState> DecodeCheckpoint(
    absl::string_view bytes, torch::nn::Module& model,
    torch::optim::Optimizer& optimizer,
    absl::string_view expected_model_name = "",
    absl::string_view expected_optimizer_name = "");

// A directory of checkpoints named "checkpoint-<global step>.dtc" (the step
// zero-padded to 9 digits), the newest being the one with the highest step,
// plus "best.dtc" for the best-validation model. Files are written with
// WriteFileAtomically (trainer/atomic_file.h), so a reader never sees a part
// of one; a writer that crashes leaves a temporary, which the next Save or
// SaveBest deletes.
class CheckpointDir {
 public:
  // Creates the directory and its parents if needed. `keep` (>= 1) is how
  // many checkpoint files Save leaves. kInvalidArgument for an empty path or
  // keep < 1; errors naming the path when it cannot be created or is not a
  // directory.
  static absl::StatusOr<CheckpointDir> Open(std::string path, int keep = 2);

  // Writes checkpoint-<global_step>.dtc atomically and returns its path.
  // Then rotates: keeps the file written and the keep - 1 newest with a
  // lower step, and deletes the other checkpoint files, including those with
  // a higher step (left by a run that got further and was resumed from an
  // older checkpoint: Latest would otherwise go back to them). Errors name
  // the file; one after the write says that the checkpoint was written.
  // kInvalidArgument for global_step < 0.
  absl::StatusOr<std::string> Save(int64_t global_step,
                                   absl::string_view bytes);

  // Writes best.dtc atomically (the best-validation model, as the PyTorch
  // tutorial's model_best) and returns its path.
  absl::StatusOr<std::string> SaveBest(absl::string_view bytes);

  struct Found {
    std::string path;
    std::string bytes;
    // "<path>: <reason>" for each newer file that was rejected, newest first,
    // so that the caller can log why it resumes from an older checkpoint.
    std::vector<std::string> skipped;
  };
  // The newest checkpoint file that passes ValidateCheckpointBytes (best.dtc
  // is not a candidate). kNotFound naming the directory when it has no
  // checkpoint file; kDataLoss listing every file and its reason when none
  // is valid.
  absl::StatusOr<Found> Latest() const;

  // Paths of the checkpoint files present, oldest first; empty when the
  // directory cannot be read.
  std::vector<std::string> List() const;

  const std::string& path() const { return path_; }
  int keep() const { return keep_; }

 private:
  CheckpointDir(std::string path, int keep)
      : path_(std::move(path)), keep_(keep) {}

  struct Entry {
    int64_t step;
    std::string name;
  };
  // Checkpoint files (sorted by step) and, if asked, the paths of stray
  // temporaries.
  absl::Status Scan(std::vector<Entry>* checkpoints,
                    std::vector<std::string>* temporaries) const;
  // Deletes stray temporaries, then writes `name` atomically; returns its
  // path and, if asked, the checkpoint files listed before the write.
  absl::StatusOr<std::string> Write(absl::string_view name,
                                    absl::string_view bytes,
                                    std::vector<Entry>* listed);
  std::string Join(absl::string_view name) const;

  std::string path_;
  int keep_;
};

}  // namespace dtrain::trainer

#endif  // DTRAIN_TRAINER_CHECKPOINT_H_
