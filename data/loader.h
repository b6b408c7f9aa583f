// DataLoader: batches of an ExampleSource (an in-memory Dataset, or a reader
// that decodes files per batch such as ImageFolder) in DistributedSampler
// order, transformed, prepared ahead of the training loop by background
// threads.
//
//   LoaderOptions options;
//   options.batch_size = 64;
//   options.num_workers = 2;
//   DTRAIN_ASSIGN_OR_RETURN(
//       std::unique_ptr<DataLoader> loader,
//       DataLoader::Create(std::move(dataset), std::move(sampler),
//                          std::move(pipeline), options));
//   for (int64_t epoch = 0; epoch < epochs; ++epoch) {
//     loader->SetEpoch(epoch);
//     for (;;) {
//       DTRAIN_ASSIGN_OR_RETURN(absl::optional<Batch> batch,
//                               loader->Next());
//       if (!batch.has_value()) break;  // End of the epoch.
//       Train(batch->images, batch->labels);
//     }
//   }
//
// Determinism: batch k of an epoch holds the sampler's indices
// [k * batch_size, (k + 1) * batch_size) of that epoch (counted from the
// restored position after Restore), and every random
// transform is seeded per example from (options.seed, epoch, the example's
// slot in the epoch). So the batches are the same, bit for bit, for any
// number of workers, and a run restored from a saved state continues with
// exactly the batches the uninterrupted run would have produced.
//
// Work: for a Dataset, deterministic transforms at the front of the pipeline
// run once over the whole dataset in Create when the result fits in
// options.precompute_limit_bytes; per batch, the loader gathers the examples
// from the source (one index_select for a Dataset; reading, decoding and the
// per-example transforms for ImageFolder, with the same example seeds as the
// batch transforms) and runs the rest of the pipeline. With num_workers = 0
// that happens inside Next on the caller's thread; with N workers, N threads
// keep up to N * prefetch_factor batches ready, and Next only waits for the
// next one in order.
//
// Random transforms take uint8 as well as floats: placing them before ToFloat
// keeps a precomputed resize in uint8, a quarter of the memory (STL-10's
// training set at 224 px: 750 MB instead of 3 GB), and ToFloat + Normalize
// then run fused, in one pass, per batch.
//
// Thread safety: one thread calls the methods of a DataLoader; the workers
// are internal. The destructor stops and joins them (waiting at most for the
// batches they are preparing).
#ifndef DTRAIN_DATA_LOADER_H_
#define DTRAIN_DATA_LOADER_H_

#include <ATen/core/Tensor.h>

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/optional.h"
#include "data/dataset.h"
#include "data/distributed_sampler.h"
#include "data/example_source.h"
#include "data/transforms.h"

namespace dtrain::data {

struct LoaderOptions {
  // Examples per batch, >= 1.
  int64_t batch_size = 64;
  // Background threads preparing batches; 0 prepares each batch inside Next.
  int num_workers = 0;
  // Batches each worker may prepare ahead of the consumer, >= 1 (PyTorch's
  // prefetch_factor).
  int prefetch_factor = 2;
  // Drop the last batch of an epoch when it is smaller than batch_size.
  // (Independent of the sampler's drop_last, as in PyTorch.)
  bool drop_last = false;
  // Return batches in page-locked memory, for faster and asynchronous copies
  // to a CUDA device. Needs a LibTorch with CUDA (Create fails otherwise).
  bool pin_memory = false;
  // Seed of the random transforms; every rank should use the same.
  uint64_t seed = 0;
  // Run the deterministic transforms at the front of the pipeline once over
  // the whole dataset when the result takes at most this many bytes; 0 never.
  int64_t precompute_limit_bytes = int64_t{4} << 30;
};

struct Batch {
  // [B, ...] after the transforms; B < batch_size only for the last batch.
  at::Tensor images;
  // [B] int64.
  at::Tensor labels;
  // [B] int64: the dataset indices of the examples, in sampler order.
  at::Tensor indices;
  int64_t epoch = 0;
  // Examples of this epoch (for this rank) before this batch.
  int64_t position = 0;
};

class DataLoader {
 public:
  // The loader owns the sampler, whose dataset size must be dataset.size().
  // Precomputes (see above) and runs the whole pipeline on one example, so
  // that a transform that cannot take this dataset's examples fails here,
  // not in the middle of an epoch. kInvalidArgument for batch_size < 1,
  // num_workers < 0, prefetch_factor < 1, precompute_limit_bytes < 0, a
  // sampler of another size, or a transform error; kFailedPrecondition for
  // pin_memory without CUDA.
  static absl::StatusOr<std::unique_ptr<DataLoader>> Create(
      Dataset dataset, DistributedSampler sampler, TransformPipeline transforms,
      const LoaderOptions& options);

  // The same for any source; precomputing applies when source->AsDataset()
  // is not null. The first example is gathered (for a file reader: read and
  // decoded) and transformed here, so that a pipeline that does not suit the
  // source fails now. Also kInvalidArgument for a null source.
  static absl::StatusOr<std::unique_ptr<DataLoader>> Create(
      std::shared_ptr<const ExampleSource> source, DistributedSampler sampler,
      TransformPipeline transforms, const LoaderOptions& options);

  // The same with a DistributedSampler over the whole dataset made from
  // `sampling` (rank, num_replicas, shuffle, seed), as most data-parallel
  // loops want: DistributedSampler::Create's errors, then the above.
  static absl::StatusOr<std::unique_ptr<DataLoader>> Create(
      Dataset dataset, const DistributedSamplerOptions& sampling,
      TransformPipeline transforms, const LoaderOptions& options);

  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Starts `epoch` (DistributedSampler::SetEpoch: from its first batch,
  // except right after Restore). Batches being prepared for the previous
  // epoch are dropped. The workers start on the new epoch at once.
  void SetEpoch(int64_t epoch);

  // Continues from a saved state (DistributedSampler::Restore, same errors).
  absl::Status Restore(const SamplerState& state);

  // What to save in a checkpoint: the epoch and the number of examples of it
  // that Next has returned (not those merely prefetched).
  SamplerState state() const { return sampler_.state(); }

  // The next batch of the epoch; absl::nullopt at its end (and on every call
  // after, until SetEpoch or Restore). An error, from a transform or from
  // LibTorch, names the epoch and batch; the position does not move, so
  // calling Next again retries that batch.
  absl::StatusOr<absl::optional<Batch>> Next();

  // Batches in a whole epoch, and those left in the current one.
  int64_t batches_per_epoch() const;
  int64_t batches_left() const;

  const ExampleSource& source() const { return *source_; }
  const DistributedSampler& sampler() const { return sampler_; }
  const LoaderOptions& options() const { return options_; }

  // Where each transform runs: "precomputed: ToFloat -> Normalize(...);
  // per batch: RandomCrop(...)".
  std::string DebugString() const;

 private:
  // One epoch's (or its resumed remainder's) worth of batches.
  struct Job {
    int64_t epoch;
    // Sampler position of the first index.
    int64_t start;
    int64_t num_batches;
    std::vector<int64_t> indices;
    // The sampler's, to compute example slots (DistributedSampler::GlobalSlot)
    // without touching the sampler from the workers.
    int64_t slot_start;
    int64_t rank;
    int64_t num_replicas;
  };

  DataLoader(std::shared_ptr<const ExampleSource> source,
             DistributedSampler sampler, TransformPipeline transforms,
             const LoaderOptions& options,
             std::shared_ptr<const ExampleSource> gather_from,
             size_t precomputed);

  int64_t BatchesFor(int64_t examples) const;
  absl::StatusOr<Batch> MakeBatch(const Job& job, int64_t k) const;
  void StartJob();
  void CancelJob();
  void WorkerLoop();
  // Both need mu_ held.
  bool HasWork() const;
  bool NextIsReady() const;

  const std::shared_ptr<const ExampleSource> source_;
  DistributedSampler sampler_;
  const TransformPipeline transforms_;
  const LoaderOptions options_;
  // source_, or (for a Dataset) its images after the first `precomputed_`
  // transforms.
  const std::shared_ptr<const ExampleSource> gather_from_;
  const size_t precomputed_;

  // std::mutex rather than absl::Mutex: Debian's Abseil is not built for
  // ThreadSanitizer, which then reports false races; with std::mutex the
  // loader's threads can be checked under --config=tsan.
  mutable std::mutex mu_;
  // Workers wait on work_cv_ for a batch to claim; Next waits on ready_cv_.
  std::condition_variable work_cv_;
  std::condition_variable ready_cv_;
  // Guarded by mu_ from here on.
  std::shared_ptr<const Job> job_;
  // Batches of job_ handed to workers, and delivered by Next.
  int64_t next_claim_ = 0;
  int64_t next_deliver_ = 0;
  std::map<int64_t, absl::StatusOr<Batch>> ready_;
  bool stop_ = false;

  std::vector<std::thread> workers_;
};

}  // namespace dtrain::data

#endif  // DTRAIN_DATA_LOADER_H_
