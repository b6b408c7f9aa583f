// DistributedSampler: which examples each rank trains on, in which order,
// epoch after epoch. For the same arguments it yields exactly the indices of
// PyTorch's torch.utils.data.distributed.DistributedSampler (checked against
// PyTorch 1.13 in the tests):
// SamplerState's text form, which checkpoints store: docs/FORMATS.md.
//
//   num_samples = ceil(N / R), or with drop_last and N % R != 0,
//                 ceil((N - R) / R) = floor(N / R);
//   total_size  = num_samples * R;
//   indices     = shuffle ? randperm(N) with a CPU generator seeded
//                 seed + epoch : 0, 1, ..., N - 1;
//                 then, without drop_last, padded to total_size by repeating
//                 the list from its start (as often as needed when R > N);
//                 with drop_last, cut to total_size;
//   rank r gets indices[r : total_size : R].
//
// With pad = false (and no drop_last) the list is not padded: rank r gets
// indices[r : N : R], every example exactly once per epoch, and ranks differ
// by at most one example (hence by at most one batch). Accelerate calls this
// even_batches=False; the ranks' loop must then cope with uneven inputs
// (dist/ddp/join.h).
//
// (LibTorch's own DistributedRandomSampler partitions differently and ignores
// set_epoch; it is not used.)
//
// Unlike PyTorch's, this sampler also remembers how far the current epoch
// has been consumed, so that a checkpoint can save the position and a resumed
// run continue with the next example: see SamplerState and Restore.
//
// A state saved with another world size restores too. At an epoch boundary
// the result is exact: the next epoch's order does not depend on the world
// size, only its partition does. Inside an epoch, what the saved ranks had
// not consumed yet (slots from `start` = the first unconsumed slot of the
// padded order, up to N) is partitioned anew over the new ranks for the rest
// of that epoch, by the same rule with that list in place of the dataset:
//   L = indices[start : N];  rank r gets L padded (or cut, with drop_last)
//   to a multiple of R, [r : : R].
// Every unconsumed example is then seen once in that epoch; the padding that
// evens out the ranks differs from the uninterrupted run's. A slot's number
// is its place in the epoch's order whatever the partition, so per-example
// seeds (GlobalSlot) stay those of the uninterrupted run.
//
// Not thread-safe: one thread (the loader's consumer) uses a sampler.
#ifndef DTRAIN_DATA_DISTRIBUTED_SAMPLER_H_
#define DTRAIN_DATA_DISTRIBUTED_SAMPLER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace dtrain::data {

struct DistributedSamplerOptions {
  // World size and this process's rank: 0 <= rank < num_replicas.
  int64_t num_replicas = 1;
  int64_t rank = 0;
  bool shuffle = true;
  // The generator of epoch e is seeded seed + e modulo 2^64 (PyTorch takes a
  // negative sum modulo 2^64 too, but raises when the sum exceeds 2^64 - 1);
  // every rank must use the same seed.
  uint64_t seed = 0;
  bool drop_last = false;
  // Repeat examples so that every rank gets as many (PyTorch's sampler);
  // false leaves the ranks uneven (see above). Not part of SamplerState: it
  // changes only the tail of an epoch, so a state restores either way.
  bool pad = true;
};

// Where a sampler stands, to save in a checkpoint and restore. `epoch` and
// `position` (indices of the epoch already consumed, 0..num_samples) say
// where to continue; `start` is 0 but in an epoch re-partitioned after a
// restore with another world size (see above); the other fields identify the
// partition: dataset size, seed, shuffle and drop_last must match on restore,
// num_replicas may differ. The rank is not part of it: every rank is at the
// same position, so rank 0's saved state restores any rank.
struct SamplerState {
  int64_t epoch = 0;
  int64_t position = 0;
  int64_t start = 0;
  int64_t dataset_size = 0;
  int64_t num_replicas = 1;
  uint64_t seed = 0;
  bool shuffle = true;
  bool drop_last = false;

  // One line of text, e.g. "dtrain.DistributedSampler v1 epoch=3
  // position=512 dataset_size=60000 num_replicas=4 seed=0 shuffle=1
  // drop_last=0" (" start=S" follows when S is not 0).
  std::string Serialize() const;
  // Parses what Serialize wrote; kInvalidArgument quoting the text otherwise.
  static absl::StatusOr<SamplerState> Parse(absl::string_view text);

  friend bool operator==(const SamplerState& a, const SamplerState& b);
  friend bool operator!=(const SamplerState& a, const SamplerState& b) {
    return !(a == b);
  }
};

class DistributedSampler {
 public:
  // kInvalidArgument for dataset_size < 0, num_replicas < 1, or a rank
  // outside [0, num_replicas). Starts at epoch 0, position 0.
  static absl::StatusOr<DistributedSampler> Create(
      int64_t dataset_size, const DistributedSamplerOptions& options);

  // PyTorch's len(sampler): how many indices each rank gets per epoch.
  static int64_t NumSamples(int64_t dataset_size, int64_t num_replicas,
                            bool drop_last);

  // Moves to `epoch` at position 0, as PyTorch's set_epoch followed by a new
  // iteration. One exception makes resuming simple: right after Restore,
  // SetEpoch with the restored epoch keeps the restored position, so the
  // usual loop `Restore(saved); for (e = saved.epoch; ...) { SetEpoch(e);
  // ... }` continues where the saved run stopped.
  void SetEpoch(int64_t epoch);

  // Continues from a saved state, re-partitioning the rest of its epoch when
  // it was saved with another world size (see above). kInvalidArgument,
  // changing nothing, when the state belongs to another order (different
  // dataset size, seed, shuffle or drop_last: the message names the field)
  // or its start or position lie outside its partition.
  absl::Status Restore(const SamplerState& state);

  // The state to save; position counts what Advance and Next consumed.
  SamplerState state() const;

  int64_t epoch() const { return epoch_; }
  int64_t position() const { return position_; }
  // The first slot of this epoch's partition: 0 but after a restore that
  // re-partitioned the rest of an epoch.
  int64_t start() const { return start_; }
  // This rank's indices in the current epoch: PyTorch's len(sampler), or in
  // a re-partitioned epoch this rank's share of what was left; without
  // padding, this rank's own count.
  int64_t num_samples() const { return num_samples_; }
  // PyTorch's total_size, num_samples() * num_replicas (padded samplers).
  int64_t total_size() const { return num_samples_ * options_.num_replicas; }
  int64_t remaining() const { return num_samples_ - position_; }
  int64_t dataset_size() const { return dataset_size_; }
  const DistributedSamplerOptions& options() const { return options_; }

  // This rank's indices for the current epoch, all num_samples() of them
  // (what iterating PyTorch's sampler yields), whatever the position.
  const std::vector<int64_t>& indices() const { return indices_; }

  // The next min(max_count, remaining()) indices; moves the position past
  // them. Empty at the end of the epoch.
  absl::Span<const int64_t> Next(int64_t max_count);

  // Moves the position forward by min(count, remaining()) without reading.
  void Advance(int64_t count);

  // The slot of this rank's i-th index in the padded, interleaved order of
  // all ranks: start + rank + i * num_replicas. Unique across ranks and
  // stable within an epoch; slots at or past the dataset size are padding.
  // The loader seeds each example's augmentation with it.
  int64_t GlobalSlot(int64_t i) const {
    return Slot(start_, options_.rank, options_.num_replicas, i);
  }
  static int64_t Slot(int64_t start, int64_t rank, int64_t num_replicas,
                      int64_t i) {
    return start + rank + i * num_replicas;
  }

 private:
  DistributedSampler(int64_t dataset_size, DistributedSamplerOptions options);
  // This rank's share of slots [start, N) of the epoch's order, for
  // `num_replicas` ranks, padded (or cut) to the same count on every rank.
  static int64_t PartitionSize(int64_t dataset_size, int64_t start,
                               int64_t num_replicas, bool drop_last);
  // This rank's share from `start` under its options (padded or not).
  int64_t RankSamples(int64_t start) const;
  void ComputeIndices();

  int64_t dataset_size_;
  DistributedSamplerOptions options_;
  int64_t num_samples_;
  int64_t epoch_ = 0;
  int64_t position_ = 0;
  int64_t start_ = 0;
  bool resume_pending_ = false;
  std::vector<int64_t> indices_;
};

// The indices PyTorch's DistributedSampler yields for one rank and epoch: the
// same as Create + SetEpoch + indices(), for tools and tests.
absl::StatusOr<std::vector<int64_t>> DistributedSamplerIndices(
    int64_t dataset_size, const DistributedSamplerOptions& options,
    int64_t epoch);

}  // namespace dtrain::data

#endif  // DTRAIN_DATA_DISTRIBUTED_SAMPLER_H_
