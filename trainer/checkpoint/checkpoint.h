// Trainer checkpoints: the model's parameters and buffers, the optimizer's
// state, the TrainingState of a run and the state of its communication hook,
// in one self-validating byte string (the format: docs/FORMATS.md). Rank 0
// encodes and writes them; to resume, rank 0 picks the newest valid file
// (checkpoint_dir.h), broadcasts its bytes, and every rank decodes them into
// its own model and optimizer. Hence the API works on byte strings.
//
// The header is checked first, so a truncated or corrupted file is reported
// as such. The payload is then read by bounds-checked code only: every
// length is checked against the bytes left before use, every count against
// what those bytes could hold, so a file with a valid header and a hostile
// payload is rejected (kDataLoss) without a large allocation or a crash.
// Version 3 is written; version 2 (no hook state) is read as a checkpoint
// whose HookState is empty. Version 1 (a LibTorch archive, whose reader could
// crash on damaged input) is rejected.
//
// Thread safety: the functions are thread-compatible.
#ifndef DTRAIN_TRAINER_CHECKPOINT_CHECKPOINT_H_
#define DTRAIN_TRAINER_CHECKPOINT_CHECKPOINT_H_

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "trainer/checkpoint/hook_state.h"
#include "trainer/checkpoint/training_state.h"

namespace dtrain::trainer {

// Size of the header that precedes the payload.
inline constexpr size_t kCheckpointHeaderSize = 24;

// Serializes the model's parameters and buffers (by name, as
// named_parameters() and named_buffers() list them), the optimizer's group
// options and per-parameter state, `state` and `hook` (its tensors copied to
// the CPU; read them after the step that produced them has finished, as
// CommHook::State says). The optimizer must be a
// torch::optim::SGD, optim::Adadelta, torch::optim::Adam or
// torch::optim::AdamW: kInvalidArgument ("checkpoints support sgd, adadelta,
// adam and adamw ...") for another, and kInvalidArgument naming the
// tensor for one of a dtype outside the format's list, not dense, or of more
// than 8 dimensions, and naming the field for a `state` that fails
// CheckTrainingState or whose optimizer_name (when not empty) is not the
// optimizer's ("sgd", "adadelta", "adam", "adamw"), or a `hook` that fails
// CheckHookState (its tensors are held to the same rules as the model's).
// kInternal with LibTorch's message when copying a tensor to the CPU fails. The
// model and optimizer are only read.
absl::StatusOr<std::string> EncodeCheckpoint(
    const torch::nn::Module& model, const torch::optim::Optimizer& optimizer,
    const TrainingState& state, const HookState& hook = {});

// The header checks that need only the file's first kCheckpointHeaderSize
// bytes (`header`; fewer for a shorter file) and its size: magic, version,
// and that the payload length the header states is what the file holds. For
// refusing a file before reading it whole. Errors as ValidateCheckpointBytes.
absl::Status ValidateCheckpointHeader(absl::string_view header,
                                      uint64_t file_size);

// What can be checked without a model: the header (magic, version, payload
// length, CRC-32), then step 2 of DecodeCheckpoint (the payload's structure
// and the range of every field: CheckTrainingState, Adadelta's step counts,
// optimizer_name against the optimizer state held). For choosing a file
// before broadcasting it. kInvalidArgument for bytes that are not a
// checkpoint ("not a dtrain checkpoint (magic ...)") or of a format version
// other than 2 and 3 ("checkpoint format version 1 is no longer read; ...",
// "unsupported checkpoint format version N ..."); kDataLoss for a truncated
// ("truncated: header says N payload bytes, found M"), corrupted ("checksum
// mismatch ...") or malformed ("malformed checkpoint payload: ...") one.
absl::Status ValidateCheckpointBytes(absl::string_view bytes);

// Loads a checkpoint into `model` and `optimizer`, all or nothing, and
// returns its TrainingState and, when `hook` is not null, stores its hook
// state there (CPU tensors; an empty HookState for version 2). Nothing
// checks the hook state against a hook: CommHook::LoadState does. In order:
//  1. the header checks (ValidateCheckpointHeader, then the CRC-32);
//  2. kDataLoss ("malformed checkpoint payload: ...", naming the field and
//     its offset in the payload, or a field, its value and its bound) unless
//     the whole payload is what EncodeCheckpoint writes (or wrote in
//     version 2), its TrainingState passes CheckTrainingState
//     (training_state.h) and its hook state CheckHookState (hook_state.h);
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
// restored but the model possibly partly loaded. `hook` is set only on
// success.
absl::StatusOr<TrainingState> DecodeCheckpoint(
    absl::string_view bytes, torch::nn::Module& model,
    torch::optim::Optimizer& optimizer,
    absl::string_view expected_model_name = "",
    absl::string_view expected_optimizer_name = "", HookState* hook = nullptr);

}  // namespace dtrain::trainer

#endif  // DTRAIN_TRAINER_CHECKPOINT_CHECKPOINT_H_
