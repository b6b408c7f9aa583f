#include "data/loader.h"

#include <ATen/Context.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/max.h>

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "data/synthetic.h"
#include "data/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::data {
namespace {

using ::dtrain::data::testing::Watchdog;
using ::testing::HasSubstr;

Dataset Synthetic(int64_t size, uint64_t seed = 3) {
  SyntheticOptions o;
  o.size = size;
  o.height = 12;
  o.width = 10;
  o.seed = seed;
  absl::StatusOr<Dataset> d = MakeSyntheticDataset(o);
  EXPECT_TRUE(d.ok()) << d.status();
  return *std::move(d);
}

DistributedSampler Sampler(int64_t size, int64_t num_replicas = 1,
                           int64_t rank = 0, bool drop_last = false) {
  DistributedSamplerOptions o;
  o.num_replicas = num_replicas;
  o.rank = rank;
  o.seed = 5;
  o.drop_last = drop_last;
  absl::StatusOr<DistributedSampler> s = DistributedSampler::Create(size, o);
  EXPECT_TRUE(s.ok()) << s.status();
  return *std::move(s);
}

TransformPipeline Augment() {
  absl::StatusOr<TransformPipeline> p = TransformPipeline::Builder()
                                            .ToFloat()
                                            .Normalize({0.5}, {0.25})
                                            .RandomCrop(12, 10, 2)
                                            .RandomHorizontalFlip()
                                            .Build();
  EXPECT_TRUE(p.ok()) << p.status();
  return *std::move(p);
}

LoaderOptions Options(int64_t batch_size, int workers) {
  LoaderOptions o;
  o.batch_size = batch_size;
  o.num_workers = workers;
  o.seed = 42;
  return o;
}

std::unique_ptr<DataLoader> MakeLoader(Dataset dataset,
                                       DistributedSampler sampler,
                                       TransformPipeline transforms,
                                       const LoaderOptions& options) {
  absl::StatusOr<std::unique_ptr<DataLoader>> loader = DataLoader::Create(
      std::move(dataset), std::move(sampler), std::move(transforms), options);
  EXPECT_TRUE(loader.ok()) << loader.status();
  return loader.ok() ? *std::move(loader) : nullptr;
}

// All batches left in the current epoch.
std::vector<Batch> Drain(DataLoader& loader) {
  std::vector<Batch> out;
  for (;;) {
    absl::StatusOr<absl::optional<Batch>> b = loader.Next();
    EXPECT_TRUE(b.ok()) << b.status();
    if (!b.ok() || !b->has_value()) return out;
    out.push_back(**std::move(b));
  }
}

void ExpectSameBatches(const std::vector<Batch>& a, const std::vector<Batch>& b,
                       const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].epoch, b[i].epoch) << what << " batch " << i;
    EXPECT_EQ(a[i].position, b[i].position) << what << " batch " << i;
    EXPECT_TRUE(at::equal(a[i].indices, b[i].indices))
        << what << " batch " << i;
    EXPECT_TRUE(at::equal(a[i].labels, b[i].labels)) << what << " batch " << i;
    EXPECT_TRUE(at::equal(a[i].images, b[i].images)) << what << " batch " << i;
  }
}

class LoaderTest : public ::testing::Test {
 protected:
  // Threads must never hang the test binary.
  Watchdog watchdog_{absl::Seconds(40)};
};

TEST_F(LoaderTest, BatchesFollowTheSamplerOrder) {
  const Dataset dataset = Synthetic(23);
  DistributedSampler sampler = Sampler(23);
  sampler.SetEpoch(2);
  const std::vector<int64_t> order = sampler.indices();
  std::unique_ptr<DataLoader> loader = MakeLoader(
      dataset, std::move(sampler), TransformPipeline(), Options(5, 0));
  ASSERT_NE(loader, nullptr);
  loader->SetEpoch(2);
  EXPECT_EQ(loader->batches_per_epoch(), 5);
  const std::vector<Batch> batches = Drain(*loader);
  ASSERT_EQ(batches.size(), 5u);
  for (size_t k = 0; k < batches.size(); ++k) {
    const Batch& b = batches[k];
    const int64_t n = k < 4 ? 5 : 3;
    ASSERT_EQ(b.indices.size(0), n);
    EXPECT_EQ(b.position, static_cast<int64_t>(k) * 5);
    EXPECT_EQ(b.epoch, 2);
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_EQ(b.indices[i].item<int64_t>(), order[k * 5 + i]);
    }
    EXPECT_TRUE(
        at::equal(b.images, at::index_select(dataset.images(), 0, b.indices)));
    EXPECT_TRUE(
        at::equal(b.labels, at::index_select(dataset.labels(), 0, b.indices)));
    EXPECT_EQ(b.labels.scalar_type(), at::kLong);
  }
  // The end stays the end until the next epoch.
  absl::StatusOr<absl::optional<Batch>> after = loader->Next();
  ASSERT_TRUE(after.ok());
  EXPECT_FALSE(after->has_value());
  EXPECT_EQ(loader->state().position, 23);
  loader->SetEpoch(3);
  EXPECT_EQ(Drain(*loader).size(), 5u);
}

TEST_F(LoaderTest, DropLastDropsThePartialBatch) {
  for (int workers : {0, 2}) {
    std::unique_ptr<DataLoader> loader =
        MakeLoader(Synthetic(23), Sampler(23), TransformPipeline(), [&] {
          LoaderOptions o = Options(5, workers);
          o.drop_last = true;
          return o;
        }());
    ASSERT_NE(loader, nullptr);
    EXPECT_EQ(loader->batches_per_epoch(), 4);
    const std::vector<Batch> batches = Drain(*loader);
    ASSERT_EQ(batches.size(), 4u);
    for (const Batch& b : batches) EXPECT_EQ(b.images.size(0), 5);
    EXPECT_EQ(loader->state().position, 23) << "the dropped rest is consumed";
  }
}

// The central promise: for any number of workers, the same batches.
TEST_F(LoaderTest, SameBatchesForAnyNumberOfWorkers) {
  const Dataset dataset = Synthetic(101);
  std::vector<std::vector<Batch>> runs;
  for (int workers = 0; workers <= 4; ++workers) {
    std::unique_ptr<DataLoader> loader =
        MakeLoader(dataset, Sampler(101, 2, 1), Augment(), Options(8, workers));
    ASSERT_NE(loader, nullptr);
    std::vector<Batch> all;
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
      loader->SetEpoch(epoch);
      std::vector<Batch> batches = Drain(*loader);
      EXPECT_EQ(batches.size(), 7u);  // 51 examples for rank 1 of 2.
      all.insert(all.end(), batches.begin(), batches.end());
    }
    runs.push_back(std::move(all));
  }
  for (int workers = 1; workers <= 4; ++workers) {
    ExpectSameBatches(runs[0], runs[workers],
                      absl::StrCat(workers, " workers vs 0"));
  }
  // Augmentation does change the images, and differs between epochs.
  EXPECT_EQ(runs[0][0].images.scalar_type(), at::kFloat);
  EXPECT_FALSE(at::equal(runs[0][0].images, runs[0][7].images));
}

// Augmentation is seeded per example, so even the batch size does not
// change what an example looks like.
TEST_F(LoaderTest, AugmentationDoesNotDependOnTheBatchSize) {
  const Dataset dataset = Synthetic(40);
  at::Tensor by_size[2];
  int i = 0;
  for (int64_t batch_size : {4, 7}) {
    std::unique_ptr<DataLoader> loader =
        MakeLoader(dataset, Sampler(40), Augment(), Options(batch_size, 2));
    ASSERT_NE(loader, nullptr);
    std::vector<at::Tensor> images;
    for (const Batch& b : Drain(*loader)) images.push_back(b.images);
    by_size[i++] = at::cat(images);
  }
  EXPECT_TRUE(at::equal(by_size[0], by_size[1]));
}

TEST_F(LoaderTest, PrecomputingChangesNothingButSpeed) {
  const Dataset dataset = Synthetic(30);
  std::vector<std::vector<Batch>> runs;
  for (int64_t limit : {int64_t{0}, int64_t{1} << 30}) {
    LoaderOptions o = Options(8, 1);
    o.precompute_limit_bytes = limit;
    std::unique_ptr<DataLoader> loader =
        MakeLoader(dataset, Sampler(30), Augment(), o);
    ASSERT_NE(loader, nullptr);
    EXPECT_THAT(
        loader->DebugString(),
        HasSubstr(limit == 0 ? "precomputed: none; per batch: ToFloat -> "
                               "Normalize"
                             : "precomputed: ToFloat -> Normalize(mean=[0.5], "
                               "std=[0.25]); per batch: RandomCrop"));
    runs.push_back(Drain(*loader));
  }
  ExpectSameBatches(runs[0], runs[1], "precomputed vs not");
}

TEST_F(LoaderTest, ResumeContinuesWithTheSameBatches) {
  const Dataset dataset = Synthetic(90);
  // The uninterrupted run: epochs 0 and 1.
  std::unique_ptr<DataLoader> full =
      MakeLoader(dataset, Sampler(90, 3, 2), Augment(), Options(4, 2));
  ASSERT_NE(full, nullptr);
  std::vector<Batch> expected;
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    full->SetEpoch(epoch);
    for (Batch& b : Drain(*full)) expected.push_back(std::move(b));
  }
  ASSERT_EQ(expected.size(), 16u);

  for (int workers : {0, 3}) {
    // A run stopped after 3 batches of epoch 0, its state saved as text...
    std::string saved;
    std::vector<Batch> got;
    {
      std::unique_ptr<DataLoader> first =
          MakeLoader(dataset, Sampler(90, 3, 2), Augment(), Options(4, 2));
      ASSERT_NE(first, nullptr);
      first->SetEpoch(0);
      for (int k = 0; k < 3; ++k) {
        absl::StatusOr<absl::optional<Batch>> b = first->Next();
        ASSERT_TRUE(b.ok() && b->has_value());
        got.push_back(**std::move(b));
      }
      saved = first->state().Serialize();
      EXPECT_EQ(first->state().position, 12);
    }
    // ...and a new process that restores it, with another number of workers.
    absl::StatusOr<SamplerState> state = SamplerState::Parse(saved);
    ASSERT_TRUE(state.ok()) << state.status();
    std::unique_ptr<DataLoader> second =
        MakeLoader(dataset, Sampler(90, 3, 2), Augment(), Options(4, workers));
    ASSERT_NE(second, nullptr);
    ASSERT_TRUE(second->Restore(*state).ok());
    EXPECT_EQ(second->batches_left(), 5);
    for (int64_t epoch = state->epoch; epoch < 2; ++epoch) {
      second->SetEpoch(epoch);
      for (Batch& b : Drain(*second)) got.push_back(std::move(b));
    }
    ExpectSameBatches(expected, got,
                      absl::StrCat("resumed, ", workers, " workers"));
  }
}

TEST_F(LoaderTest, SetEpochMidEpochDropsPrefetchedBatches) {
  const Dataset dataset = Synthetic(64);
  std::unique_ptr<DataLoader> reference =
      MakeLoader(dataset, Sampler(64), Augment(), Options(4, 0));
  ASSERT_NE(reference, nullptr);
  reference->SetEpoch(1);
  const std::vector<Batch> epoch1 = Drain(*reference);

  std::unique_ptr<DataLoader> loader =
      MakeLoader(dataset, Sampler(64), Augment(), Options(4, 3));
  ASSERT_NE(loader, nullptr);
  ASSERT_TRUE(loader->Next().ok());  // Workers now prefetch epoch 0.
  absl::SleepFor(absl::Milliseconds(20));
  loader->SetEpoch(1);
  ExpectSameBatches(epoch1, Drain(*loader), "after switching epochs");
}

// SetEpoch with the current epoch starts it over, as iterating a PyTorch
// DataLoader again does.
TEST_F(LoaderTest, SetEpochWithTheSameEpochStartsOver) {
  const Dataset dataset = Synthetic(40);
  for (int workers : {0, 2}) {
    std::unique_ptr<DataLoader> loader =
        MakeLoader(dataset, Sampler(40), Augment(), Options(4, workers));
    ASSERT_NE(loader, nullptr);
    loader->SetEpoch(1);
    loader->SetEpoch(1);  // Twice before any batch: changes nothing.
    const std::vector<Batch> whole = Drain(*loader);
    ASSERT_EQ(whole.size(), 10u);
    loader->SetEpoch(1);
    for (int k = 0; k < 3; ++k) ASSERT_TRUE(loader->Next().ok());
    loader->SetEpoch(1);
    ExpectSameBatches(whole, Drain(*loader),
                      absl::StrCat("restarted, ", workers, " workers"));
  }
}

// A transform that fails on images holding the value 255.
class FailOnMarker : public Transform {
 public:
  std::string ToString() const override { return "FailOnMarker"; }
  bool is_random() const override { return true; }
  absl::StatusOr<at::Tensor> Apply(const at::Tensor& batch,
                                   absl::Span<const uint64_t>) const override {
    if (batch.numel() > 0 && at::max(batch).item<uint8_t>() == 255) {
      return absl::InvalidArgumentError("marker found");
    }
    return batch;
  }
};

TEST_F(LoaderTest, ErrorsNameTheBatchAndNextRetries) {
  at::Tensor images = Synthetic(20).images().clamp_max(254);
  images[13].fill_(255);
  absl::StatusOr<Dataset> dataset =
      Dataset::Create("marked", images, Synthetic(20).labels(), 10);
  ASSERT_TRUE(dataset.ok());
  absl::StatusOr<TransformPipeline> pipeline =
      TransformPipeline::Builder()
          .Add(std::make_shared<FailOnMarker>())
          .Build();
  ASSERT_TRUE(pipeline.ok());
  for (int workers : {0, 2}) {
    DistributedSamplerOptions so;
    so.shuffle = false;
    absl::StatusOr<DistributedSampler> sampler =
        DistributedSampler::Create(20, so);
    ASSERT_TRUE(sampler.ok());
    std::unique_ptr<DataLoader> loader =
        MakeLoader(*dataset, *sampler, *pipeline, Options(4, workers));
    ASSERT_NE(loader, nullptr);
    for (int k = 0; k < 3; ++k) ASSERT_TRUE(loader->Next().ok());
    for (int attempt = 0; attempt < 2; ++attempt) {
      absl::StatusOr<absl::optional<Batch>> bad = loader->Next();
      ASSERT_FALSE(bad.ok());
      EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(bad.status().message(),
                  HasSubstr("batch at position 12 of epoch 0: transform 0 of "
                            "[FailOnMarker]: marker found"));
      EXPECT_EQ(loader->state().position, 12);
    }
    // Skipping the bad batch is the caller's choice: a new epoch works.
    loader->SetEpoch(1);
    EXPECT_TRUE(loader->Next().ok());
  }
}

TEST_F(LoaderTest, DestroyingWhileWorkersPrefetchDoesNotHang) {
  const Dataset dataset = Synthetic(2000);
  for (int workers : {1, 4}) {
    std::unique_ptr<DataLoader> loader =
        MakeLoader(dataset, Sampler(2000), Augment(), Options(16, workers));
    ASSERT_NE(loader, nullptr);
    ASSERT_TRUE(loader->Next().ok());
    loader.reset();  // Joins the workers mid-epoch.
  }
  // Never asked for a batch at all.
  std::unique_ptr<DataLoader> idle =
      MakeLoader(dataset, Sampler(2000), Augment(), Options(16, 4));
  idle->SetEpoch(3);
}

TEST_F(LoaderTest, RanksTogetherCoverTheDataset) {
  const Dataset dataset = Synthetic(50);
  std::set<int64_t> seen;
  for (int64_t rank = 0; rank < 4; ++rank) {
    std::unique_ptr<DataLoader> loader = MakeLoader(
        dataset, Sampler(50, 4, rank), TransformPipeline(), Options(6, 1));
    ASSERT_NE(loader, nullptr);
    loader->SetEpoch(9);
    int64_t count = 0;
    for (const Batch& b : Drain(*loader)) {
      for (int64_t i = 0; i < b.indices.size(0); ++i) {
        seen.insert(b.indices[i].item<int64_t>());
        ++count;
      }
    }
    EXPECT_EQ(count, 13);
  }
  EXPECT_EQ(seen.size(), 50u);
}

TEST_F(LoaderTest, SamplerOptionsMakeTheSampler) {
  const Dataset dataset = Synthetic(50);
  DistributedSamplerOptions sampling;
  sampling.num_replicas = 4;
  sampling.rank = 1;
  sampling.seed = 5;
  absl::StatusOr<std::unique_ptr<DataLoader>> loader =
      DataLoader::Create(dataset, sampling, Augment(), Options(6, 1));
  ASSERT_TRUE(loader.ok()) << loader.status();
  EXPECT_EQ((*loader)->sampler().dataset_size(), 50);
  EXPECT_EQ((*loader)->sampler().options().rank, 1);
  std::unique_ptr<DataLoader> explicit_sampler =
      MakeLoader(dataset, Sampler(50, 4, 1), Augment(), Options(6, 1));
  ASSERT_NE(explicit_sampler, nullptr);
  (*loader)->SetEpoch(2);
  explicit_sampler->SetEpoch(2);
  ExpectSameBatches(Drain(**loader), Drain(*explicit_sampler),
                    "sampler options");

  sampling.rank = 4;
  loader = DataLoader::Create(dataset, sampling, Augment(), Options(6, 1));
  EXPECT_EQ(loader.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(loader.status().message()), HasSubstr("rank"));
}

TEST_F(LoaderTest, EmptyDataset) {
  std::unique_ptr<DataLoader> loader =
      MakeLoader(Synthetic(0), Sampler(0), Augment(), Options(4, 2));
  ASSERT_NE(loader, nullptr);
  absl::StatusOr<absl::optional<Batch>> b = loader->Next();
  ASSERT_TRUE(b.ok());
  EXPECT_FALSE(b->has_value());
}

TEST_F(LoaderTest, CreateRejectsBadOptions) {
  const Dataset dataset = Synthetic(10);
  struct Case {
    LoaderOptions options;
    const char* message;
  };
  std::vector<Case> cases;
  cases.push_back({Options(0, 0), "batch_size must be >= 1, got 0"});
  cases.push_back({Options(4, -1), "num_workers must be >= 0, got -1"});
  cases.push_back({Options(4, 1), "prefetch_factor must be >= 1, got 0"});
  cases.back().options.prefetch_factor = 0;
  cases.push_back({Options(4, 1), "precompute_limit_bytes must be >= 0"});
  cases.back().options.precompute_limit_bytes = -1;
  for (const Case& c : cases) {
    absl::StatusOr<std::unique_ptr<DataLoader>> loader = DataLoader::Create(
        dataset, Sampler(10), TransformPipeline(), c.options);
    EXPECT_EQ(loader.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(loader.status().message(), HasSubstr(c.message));
  }
  absl::StatusOr<std::unique_ptr<DataLoader>> wrong_size = DataLoader::Create(
      dataset, Sampler(11), TransformPipeline(), Options(4, 0));
  EXPECT_THAT(wrong_size.status().message(),
              HasSubstr("the sampler was made for 11 examples"));

  // A pipeline that cannot take these examples fails now, not mid-epoch.
  absl::StatusOr<TransformPipeline> wrong =
      TransformPipeline::Builder().Normalize({0.5}, {0.5}).Build();
  ASSERT_TRUE(wrong.ok());
  absl::StatusOr<std::unique_ptr<DataLoader>> bad_transform =
      DataLoader::Create(dataset, Sampler(10), *wrong, Options(4, 0));
  EXPECT_EQ(bad_transform.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_transform.status().message(),
              HasSubstr("takes float32 or float64 batches, got Byte"));
  absl::StatusOr<TransformPipeline> too_big =
      TransformPipeline::Builder().ToFloat().RandomCrop(40, 40).Build();
  ASSERT_TRUE(too_big.ok());
  EXPECT_THAT(DataLoader::Create(dataset, Sampler(10), *too_big, Options(4, 0))
                  .status()
                  .message(),
              HasSubstr("the window is larger"));

  LoaderOptions pinned = Options(4, 0);
  pinned.pin_memory = true;
  absl::StatusOr<std::unique_ptr<DataLoader>> pin =
      DataLoader::Create(dataset, Sampler(10), TransformPipeline(), pinned);
  if (at::hasCUDA()) {
    ASSERT_TRUE(pin.ok()) << pin.status();
    absl::StatusOr<absl::optional<Batch>> b = (*pin)->Next();
    ASSERT_TRUE(b.ok() && b->has_value());
    EXPECT_TRUE((*b)->images.is_pinned());
  } else {
    EXPECT_EQ(pin.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(pin.status().message(), HasSubstr("pin_memory needs CUDA"));
  }
}

TEST_F(LoaderTest, RestoreRejectsAnotherPartition) {
  std::unique_ptr<DataLoader> loader = MakeLoader(
      Synthetic(10), Sampler(10), TransformPipeline(), Options(4, 1));
  ASSERT_NE(loader, nullptr);
  SamplerState state = loader->state();
  state.dataset_size = 11;
  EXPECT_EQ(loader->Restore(state).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Drain(*loader).size(), 3u);
}

// Many short epochs with a slow and a fast consumer: no lost, duplicated or
// reordered batch.
TEST_F(LoaderTest, StressManyEpochs) {
  const Dataset dataset = Synthetic(37);
  std::unique_ptr<DataLoader> reference =
      MakeLoader(dataset, Sampler(37), Augment(), Options(3, 0));
  std::unique_ptr<DataLoader> loader =
      MakeLoader(dataset, Sampler(37), Augment(), Options(3, 4));
  ASSERT_NE(reference, nullptr);
  ASSERT_NE(loader, nullptr);
  for (int64_t epoch = 0; epoch < 30; ++epoch) {
    reference->SetEpoch(epoch);
    loader->SetEpoch(epoch);
    std::vector<Batch> want = Drain(*reference);
    std::vector<Batch> got;
    for (;;) {
      if (epoch % 3 == 0) absl::SleepFor(absl::Microseconds(200));
      absl::StatusOr<absl::optional<Batch>> b = loader->Next();
      ASSERT_TRUE(b.ok()) << b.status();
      if (!b->has_value()) break;
      got.push_back(**std::move(b));
      // Abandon some epochs early.
      if (epoch % 7 == 6 && got.size() == 2) break;
    }
    if (epoch % 7 == 6) want.resize(2);
    ExpectSameBatches(want, got, absl::StrCat("epoch ", epoch));
  }
}

}  // namespace
}  // namespace dtrain::data
