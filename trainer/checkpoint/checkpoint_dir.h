// The directory a run keeps its checkpoints in, and its rotation: which files
// Save keeps, which it deletes, and which one a resumed run starts from
// (docs/FORMATS.md, "Checkpoint directory", has the naming rules).
//
// Thread safety: thread-compatible. A directory has one writer (rank 0);
// readers may run concurrently with it because files only appear by rename.
#ifndef DTRAIN_TRAINER_CHECKPOINT_CHECKPOINT_DIR_H_
#define DTRAIN_TRAINER_CHECKPOINT_CHECKPOINT_DIR_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dtrain::trainer {

// A directory of checkpoints named "checkpoint-<global step>.dtc" (the step
// zero-padded to 9 digits), the newest being the one with the highest step,
// plus "best.dtc" for the best-validation model. Files are written with
// base::WriteFileAtomically (base/atomic_file.h), so a reader never sees a part
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
  // older checkpoint: Latest would otherwise go back to them). Something
  // other than a regular file named like a checkpoint (a directory, a FIFO)
  // is neither kept nor deleted: a line naming it is appended to `warnings`
  // (when given) and the save succeeds. Errors name the file; one after the
  // write says that the checkpoint was written. kInvalidArgument for
  // global_step < 0.
  absl::StatusOr<std::string> Save(
      int64_t global_step, absl::string_view bytes,
      std::vector<std::string>* warnings = nullptr);

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
  // is not a candidate). Each file is checked before it is read whole: it
  // must be a regular file (a directory or FIFO named like a checkpoint is
  // skipped), of at most base::kCheckpointFileLimit bytes, whose header
  // (ValidateCheckpointHeader) states the size it has. So memory is bounded
  // by the valid checkpoint's size, whatever else the directory holds.
  // kNotFound naming the directory when it has no checkpoint file; kDataLoss
  // listing every file and its reason when none is valid.
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
    // FileTypeName of what is not a regular file; empty for a regular file.
    std::string not_regular;
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

#endif  // DTRAIN_TRAINER_CHECKPOINT_CHECKPOINT_DIR_H_
