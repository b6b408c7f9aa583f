// What an elastic run hands from one generation of ranks to the next
// (docs/RELIABILITY.md, "Elastic training"): the state the new generation
// starts from, which its rank 0 holds in memory, and, from a generation that
// failed, each rank's state as of its last committed step. A step is
// committed once the optimizer applied it, which happens only after every
// bucket's gradients were averaged on that rank; the survivors then start
// from the highest committed step among them, so that no step is lost or
// applied twice. Header-only.
#ifndef DTRAIN_TRAINER_ELASTIC_HANDOVER_H_
#define DTRAIN_TRAINER_ELASTIC_HANDOVER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/optional.h"
#include "trainer/training_data.h"

namespace dtrain::trainer {

struct ElasticHandover {
  // In: start from `start_bytes` (a checkpoint, EncodeCheckpoint's bytes) as
  // --resume starts from a checkpoint file, and --resume's directory is not
  // read. Every rank passes the same state (ShareCommittedState in
  // elastic_state.h gives it to the ranks that lacked it), and decodes its
  // own: nothing is broadcast. Empty on every rank: nothing is loaded.
  bool start_from_memory = false;
  std::string start_bytes;
  // In, when set: the start bytes, which may still be arriving, in place of
  // `start_bytes`. Called once, on the training thread, after the model and
  // the optimizer were built and before they are loaded, so that building
  // them overlaps the transfer; an error fails the run with it.
  std::function<absl::StatusOr<std::string>()> await_start_bytes;
  // Out, when the run fails after training began: this rank's checkpoint as
  // of its last committed step (the model, the optimizer, the sampler's
  // position and the hook's shared state; no per-rank hook state, which a
  // generation of another size starts fresh), and that step. Empty, and -1,
  // when it has none to give.
  std::string committed_bytes;
  int64_t committed_step = -1;
  // Called once, on the training thread, when this run's first step
  // committed, with that step's number (counted from 1): how long a new
  // generation took to train again. Unset: nothing.
  std::function<void(int64_t step)> first_step_committed;
  // In and out: the datasets, read once per process. A run that read them
  // leaves them here, and a run that finds them uses them instead of reading
  // the files again (a generation of any size reads the same files; the
  // sampler picks each rank's share).
  absl::optional<TrainingData> data;
  // In: set (from any thread) to have the ranks regroup at the next step
  // boundary, to admit joiners. The step's vote carries it to every rank, so
  // all stop after the same step; needs TrainContext::stop_requested, which
  // carries the vote. Null: never.
  const std::atomic<bool>* regroup_requested = nullptr;
  // Out: the run stopped after a committed step because the ranks voted to
  // regroup (Train returned kAborted saying so); committed_bytes is that
  // step's state.
  bool regrouped = false;
};

}  // namespace dtrain::trainer

#endif  // DTRAIN_TRAINER_ELASTIC_HANDOVER_H_
