#include "data/loader.h"

#include <ATen/Context.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/index_select.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/tensor_text.h"
#include "base/torch_guard.h"
#include "data/random.h"

namespace dtrain::data {
namespace {

// Examples per step when precomputing: bounds the temporary memory.
constexpr int64_t kPrecomputeChunk = 1024;

// Runs transforms [0, end) over the whole of `images`, chunk by chunk, into
// one contiguous tensor.
absl::StatusOr<at::Tensor> Precompute(const at::Tensor& images,
                                      const TransformPipeline& transforms,
                                      size_t end, const at::Tensor& first) {
  const int64_t n = images.size(0);
  std::vector<int64_t> shape(first.sizes().begin(), first.sizes().end());
  shape[0] = n;
  at::Tensor out = at::empty(shape, first.options());
  const std::vector<uint64_t> seeds(kPrecomputeChunk, 0);
  for (int64_t begin = 0; begin < n; begin += kPrecomputeChunk) {
    const int64_t count = std::min(kPrecomputeChunk, n - begin);
    DTRAIN_ASSIGN_OR_RETURN(
        at::Tensor part,
        transforms.Apply(images.slice(0, begin, begin + count),
                         absl::MakeConstSpan(seeds.data(), count), 0, end));
    if (part.sizes().slice(1) != first.sizes().slice(1) ||
        part.size(0) != count || part.scalar_type() != first.scalar_type()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the transforms gave examples ", begin, "..", begin + count - 1,
          " the shape ", base::ShapeString(part.sizes()), " ",
          c10::toString(part.scalar_type()), ", example 0 ",
          base::ShapeString(first.sizes()), " ",
          c10::toString(first.scalar_type())));
    }
    out.slice(0, begin, begin + count).copy_(part);
  }
  return out;
}

// A Dataset's examples after the precomputed transforms, whatever their
// shape (a transform of one's own may, say, flatten them), with its labels.
class PrecomputedSource final : public ExampleSource {
 public:
  PrecomputedSource(const Dataset& dataset, at::Tensor images)
      : name_(dataset.name()),
        images_(std::move(images)),
        labels_(dataset.labels()),
        num_classes_(dataset.num_classes()) {}

  const std::string& name() const override { return name_; }
  int64_t size() const override { return labels_.size(0); }
  int64_t num_classes() const override { return num_classes_; }
  std::vector<int64_t> example_shape() const override {
    return std::vector<int64_t>(images_.sizes().begin() + 1,
                                images_.sizes().end());
  }
  absl::StatusOr<Examples> Gather(absl::Span<const int64_t> indices,
                                  absl::Span<const uint64_t>) const override {
    const auto count = static_cast<int64_t>(indices.size());
    at::Tensor index = at::empty({count}, at::TensorOptions().dtype(at::kLong));
    std::memcpy(index.data_ptr<int64_t>(), indices.data(),
                count * sizeof(int64_t));
    return Examples{at::index_select(images_, 0, index),
                    at::index_select(labels_, 0, index)};
  }
  std::string DebugString() const override {
    return absl::StrCat(name_, " (precomputed): ", size(), " x ",
                        base::ShapeString(images_.sizes().slice(1)));
  }

 private:
  std::string name_;
  at::Tensor images_;
  at::Tensor labels_;
  int64_t num_classes_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DataLoader>> DataLoader::Create(
    Dataset dataset, const DistributedSamplerOptions& sampling,
    TransformPipeline transforms, const LoaderOptions& options) {
  DTRAIN_ASSIGN_OR_RETURN(DistributedSampler sampler,
                          DistributedSampler::Create(dataset.size(), sampling));
  return Create(std::move(dataset), std::move(sampler), std::move(transforms),
                options);
}

absl::StatusOr<std::unique_ptr<DataLoader>> DataLoader::Create(
    Dataset dataset, DistributedSampler sampler, TransformPipeline transforms,
    const LoaderOptions& options) {
  return Create(std::make_shared<const Dataset>(std::move(dataset)),
                std::move(sampler), std::move(transforms), options);
}

absl::StatusOr<std::unique_ptr<DataLoader>> DataLoader::Create(
    std::shared_ptr<const ExampleSource> source, DistributedSampler sampler,
    TransformPipeline transforms, const LoaderOptions& options) {
  auto invalid = [](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat("DataLoader: ", parts...));
  };
  if (source == nullptr) return invalid("the example source is null");
  if (options.batch_size < 1) {
    return invalid("batch_size must be >= 1, got ", options.batch_size);
  }
  if (options.num_workers < 0) {
    return invalid("num_workers must be >= 0, got ", options.num_workers);
  }
  if (options.prefetch_factor < 1) {
    return invalid("prefetch_factor must be >= 1, got ",
                   options.prefetch_factor);
  }
  if (options.precompute_limit_bytes < 0) {
    return invalid("precompute_limit_bytes must be >= 0, got ",
                   options.precompute_limit_bytes);
  }
  if (sampler.dataset_size() != source->size()) {
    return invalid("the sampler was made for ", sampler.dataset_size(),
                   " examples, dataset '", source->name(), "' has ",
                   source->size());
  }
  if (options.pin_memory && !at::hasCUDA()) {
    return absl::FailedPreconditionError(
        "DataLoader: pin_memory needs CUDA, and this LibTorch has no CUDA "
        "support or sees no GPU; leave pin_memory off on CPU-only machines");
  }

  std::shared_ptr<const ExampleSource> gather_from = source;
  size_t precomputed = 0;
  if (source->size() > 0) {
    try {
      const uint64_t seed = 0;
      const int64_t index = 0;
      const Dataset* dataset = source->AsDataset();
      const size_t prefix = transforms.deterministic_prefix_size();
      if (dataset != nullptr && prefix > 0) {
        const at::Tensor example = dataset->images().slice(0, 0, 1);
        absl::StatusOr<at::Tensor> first =
            transforms.Apply(example, absl::MakeConstSpan(&seed, 1), 0, prefix);
        if (!first.ok()) return invalid(first.status().message());
        const int64_t bytes = static_cast<int64_t>(first->nbytes());
        if (bytes > 0 &&
            bytes <= options.precompute_limit_bytes / dataset->size()) {
          absl::StatusOr<at::Tensor> all =
              Precompute(dataset->images(), transforms, prefix, *first);
          if (!all.ok()) return invalid(all.status().message());
          gather_from = std::make_shared<const PrecomputedSource>(
              *dataset, *std::move(all));
          precomputed = prefix;
        }
      }
      // The rest of the pipeline on one example: errors now, not mid-epoch.
      absl::StatusOr<Examples> examples = gather_from->Gather(
          absl::MakeConstSpan(&index, 1), absl::MakeConstSpan(&seed, 1));
      if (!examples.ok()) return invalid(examples.status().message());
      absl::StatusOr<at::Tensor> last = transforms.Apply(
          examples->images, absl::MakeConstSpan(&seed, 1), precomputed);
      if (!last.ok()) return invalid(last.status().message());
      if (last->dim() < 1 || last->size(0) != 1) {
        return invalid("the transforms turned a batch of 1 into ",
                       base::ShapeString(last->sizes()));
      }
    } catch (const std::exception& e) {
      return invalid("preparing '", source->name(),
                     "' failed: ", base::ExceptionMessage(e));
    }
  }
  return std::unique_ptr<DataLoader>(new DataLoader(
      std::move(source), std::move(sampler), std::move(transforms), options,
      std::move(gather_from), precomputed));
}

DataLoader::DataLoader(std::shared_ptr<const ExampleSource> source,
                       DistributedSampler sampler, TransformPipeline transforms,
                       const LoaderOptions& options,
                       std::shared_ptr<const ExampleSource> gather_from,
                       size_t precomputed)
    : source_(std::move(source)),
      sampler_(std::move(sampler)),
      transforms_(std::move(transforms)),
      options_(options),
      gather_from_(std::move(gather_from)),
      precomputed_(precomputed) {
  workers_.reserve(options_.num_workers);
  for (int i = 0; i < options_.num_workers; ++i) {
    workers_.emplace_back([this] { WorkerLoop(); });
  }
}

DataLoader::~DataLoader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    job_.reset();
    ready_.clear();
  }
  work_cv_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

int64_t DataLoader::BatchesFor(int64_t examples) const {
  return options_.drop_last
             ? examples / options_.batch_size
             : (examples + options_.batch_size - 1) / options_.batch_size;
}

int64_t DataLoader::batches_per_epoch() const {
  return BatchesFor(sampler_.num_samples());
}

int64_t DataLoader::batches_left() const {
  return BatchesFor(sampler_.remaining());
}

std::string DataLoader::DebugString() const {
  std::string precomputed = "none";
  std::string per_batch = "none";
  for (size_t i = 0; i < transforms_.size(); ++i) {
    std::string& list = i < precomputed_ ? precomputed : per_batch;
    const std::string name = transforms_.transform(i).ToString();
    list = list == "none" ? name : absl::StrCat(list, " -> ", name);
  }
  return absl::StrCat(
      "DataLoader(", source_->DebugString(),
      "; batch_size=", options_.batch_size, ", workers=", options_.num_workers,
      "; precomputed: ", precomputed, "; per batch: ", per_batch, ")");
}

absl::StatusOr<Batch> DataLoader::MakeBatch(const Job& job, int64_t k) const {
  const int64_t begin = k * options_.batch_size;
  const int64_t count = std::min<int64_t>(
      options_.batch_size, static_cast<int64_t>(job.indices.size()) - begin);
  return base::GuardTorch(
      absl::StatusCode::kInternal,
      absl::StrCat("DataLoader: batch at position ", job.start + begin,
                   " of epoch ", job.epoch, ": LibTorch failed: "),
      [&]() -> absl::StatusOr<Batch> {
        Batch batch;
        batch.epoch = job.epoch;
        batch.position = job.start + begin;
        batch.indices =
            at::empty({count}, at::TensorOptions().dtype(at::kLong));
        std::memcpy(batch.indices.data_ptr<int64_t>(),
                    job.indices.data() + begin, count * sizeof(int64_t));
        std::vector<uint64_t> seeds(count);
        for (int64_t i = 0; i < count; ++i) {
          seeds[i] = internal::ExampleSeed(
              options_.seed, job.epoch,
              DistributedSampler::Slot(job.slot_start, job.rank,
                                       job.num_replicas, batch.position + i));
        }
        absl::StatusOr<Examples> examples = gather_from_->Gather(
            absl::MakeConstSpan(job.indices.data() + begin, count), seeds);
        if (!examples.ok()) {
          return absl::Status(
              examples.status().code(),
              absl::StrCat("DataLoader: batch at position ", batch.position,
                           " of epoch ", job.epoch, ": ",
                           examples.status().message()));
        }
        absl::StatusOr<at::Tensor> images =
            transforms_.Apply(examples->images, seeds, precomputed_);
        if (!images.ok()) {
          return absl::Status(
              images.status().code(),
              absl::StrCat("DataLoader: batch at position ", batch.position,
                           " of epoch ", job.epoch, ": ",
                           images.status().message()));
        }
        batch.images = *std::move(images);
        batch.labels = std::move(examples->labels);
        if (options_.pin_memory) {
          batch.images = batch.images.pin_memory();
          batch.labels = batch.labels.pin_memory();
        }
        return batch;
      });
}

void DataLoader::StartJob() {
  auto job = std::make_shared<Job>();
  job->epoch = sampler_.epoch();
  job->start = sampler_.position();
  job->num_batches = BatchesFor(sampler_.remaining());
  job->slot_start = sampler_.start();
  job->rank = sampler_.options().rank;
  job->num_replicas = sampler_.options().num_replicas;
  const int64_t used =
      std::min(sampler_.remaining(), job->num_batches * options_.batch_size);
  job->indices.assign(sampler_.indices().begin() + job->start,
                      sampler_.indices().begin() + job->start + used);
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = std::move(job);
    next_claim_ = 0;
    next_deliver_ = 0;
    ready_.clear();
  }
  work_cv_.notify_all();
}

void DataLoader::CancelJob() {
  std::lock_guard<std::mutex> lock(mu_);
  job_.reset();
  ready_.clear();
}

bool DataLoader::HasWork() const {
  if (stop_) return true;
  return job_ != nullptr && next_claim_ < job_->num_batches &&
         next_claim_ < next_deliver_ + static_cast<int64_t>(workers_.size()) *
                                           options_.prefetch_factor;
}

bool DataLoader::NextIsReady() const {
  return ready_.find(next_deliver_) != ready_.end();
}

void DataLoader::WorkerLoop() {
  for (;;) {
    std::shared_ptr<const Job> job;
    int64_t k;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [this] { return HasWork(); });
      if (stop_) return;
      job = job_;
      k = next_claim_++;
    }
    absl::StatusOr<Batch> batch = MakeBatch(*job, k);
    {
      std::lock_guard<std::mutex> lock(mu_);
      // Dropped if the job was cancelled meanwhile (SetEpoch, an error).
      if (job_ != job) continue;
      ready_.emplace(k, std::move(batch));
    }
    ready_cv_.notify_one();
  }
}

void DataLoader::SetEpoch(int64_t epoch) {
  sampler_.SetEpoch(epoch);
  {
    // Already preparing exactly these batches (SetEpoch right after Restore,
    // or twice in a row): keep what the workers did.
    std::lock_guard<std::mutex> lock(mu_);
    if (job_ != nullptr && next_deliver_ == 0 &&
        job_->epoch == sampler_.epoch() && job_->start == sampler_.position() &&
        job_->slot_start == sampler_.start()) {
      return;
    }
  }
  CancelJob();
  if (!workers_.empty() && batches_left() > 0) StartJob();
}

absl::Status DataLoader::Restore(const SamplerState& state) {
  DTRAIN_RETURN_IF_ERROR(sampler_.Restore(state));
  CancelJob();
  if (!workers_.empty() && batches_left() > 0) StartJob();
  return absl::OkStatus();
}

absl::StatusOr<absl::optional<Batch>> DataLoader::Next() {
  std::shared_ptr<const Job> job;
  {
    std::lock_guard<std::mutex> lock(mu_);
    job = job_;
  }
  if (job == nullptr) {
    if (batches_left() == 0) {
      // Whatever drop_last left over counts as consumed.
      sampler_.Advance(sampler_.remaining());
      return absl::nullopt;
    }
    StartJob();
    std::lock_guard<std::mutex> lock(mu_);
    job = job_;
  }

  absl::StatusOr<Batch> batch;
  int64_t k;
  if (workers_.empty()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      k = next_deliver_;
    }
    batch = MakeBatch(*job, k);
  } else {
    std::unique_lock<std::mutex> lock(mu_);
    ready_cv_.wait(lock, [this] { return NextIsReady(); });
    k = next_deliver_;
    auto it = ready_.find(k);
    batch = std::move(it->second);
    ready_.erase(it);
  }
  if (!batch.ok()) {
    // The position stays; the next call starts over from this batch.
    CancelJob();
    return batch.status();
  }
  sampler_.Advance(batch->labels.size(0));
  bool done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    next_deliver_ = k + 1;
    done = next_deliver_ == job->num_batches;
  }
  // One more batch may be prepared ahead.
  work_cv_.notify_one();
  if (done) {
    CancelJob();
    if (options_.drop_last) sampler_.Advance(sampler_.remaining());
  }
  return absl::optional<Batch>(*std::move(batch));
}

}  // namespace dtrain::data
