// Input pipeline throughput: the DataLoader on Fashion-MNIST in batches of 128
// (target: >= 50,000 samples/s on one core, so that the ConvNet, ~3,000
// samples/s per core, never waits for data), with and without augmentation and
// precomputation, with 0-2 workers; plus the costs paid once per run (gzip
// decoding) and once per epoch (the sampler's permutation), and the STL-10
// pipeline of the ResNet-18 tutorial (resize to 224 px); and for ImageFolder,
// JPEG and PNG decoding per core and the whole per-example pipeline (read,
// decode, random resized crop or resize + center crop, flip, normalize).
//
//   bazel run //bench:data_benchmark
//   bazel run //bench:data_benchmark -- --benchmark_filter='Decode|ImageFolder'
//
// LibTorch's intra-op pool is limited to one thread, so "workers:0" is the
// whole pipeline on the calling thread: one core. Without Debian's
// dataset-fashion-mnist the loader benchmarks run on a synthetic dataset of
// the same shape (the label says which).

#include <ATen/Parallel.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "data/distributed_sampler.h"
#include "data/image_decoder.h"
#include "data/image_encoder.h"
#include "data/image_folder.h"
#include "data/image_transforms.h"
#include "data/loader.h"
#include "data/mnist.h"
#include "data/random.h"
#include "data/synthetic.h"
#include "data/transforms.h"

namespace dtrain::data {
namespace {

constexpr int64_t kBatchSize = 128;

// Fashion-MNIST's training set, or a synthetic stand-in of the same shape.
const Dataset& TrainSet(std::string* source) {
  static const auto* loaded = [] {
    absl::StatusOr<Dataset> d = LoadMnist(kFashionMnistDir, Split::kTrain);
    std::string from = "fashion-mnist";
    if (!d.ok()) {
      SyntheticOptions o;
      o.size = 60000;
      d = MakeSyntheticDataset(o);
      from = "synthetic 60000x1x28x28";
    }
    return new std::pair<Dataset, std::string>(*std::move(d), from);
  }();
  *source = loaded->second;
  return loaded->first;
}

DistributedSampler Sampler(int64_t size) {
  return *DistributedSampler::Create(size, DistributedSamplerOptions());
}

// Pulls batches for as long as the benchmark runs, epoch after epoch, as a
// training loop does.
void RunLoader(benchmark::State& state, const Dataset& dataset,
               TransformPipeline transforms, LoaderOptions options,
               const std::string& label) {
  at::set_num_threads(1);
  std::unique_ptr<DataLoader> loader = *DataLoader::Create(
      dataset, Sampler(dataset.size()), std::move(transforms), options);
  int64_t epoch = 0;
  int64_t samples = 0;
  for (auto _ : state) {
    absl::StatusOr<absl::optional<Batch>> batch = loader->Next();
    if (!batch.ok()) {
      state.SkipWithError(std::string(batch.status().message()).c_str());
      break;
    }
    if (!batch->has_value()) {
      loader->SetEpoch(++epoch);
      batch = loader->Next();
    }
    samples += (*batch)->labels.size(0);
    benchmark::DoNotOptimize((*batch)->images.data_ptr());
  }
  state.SetItemsProcessed(samples);
  state.counters["samples_per_s"] = benchmark::Counter(
      static_cast<double>(samples), benchmark::Counter::kIsRate);
  state.SetLabel(label);
}

LoaderOptions Options(int workers) {
  LoaderOptions o;
  o.batch_size = kBatchSize;
  o.num_workers = workers;
  return o;
}

// The training pipeline of the MNIST tutorial: ToFloat + Normalize, done once
// over the dataset; per batch only the gather.
void BM_LoaderFashionMnist(benchmark::State& state) {
  std::string source;
  const Dataset& dataset = TrainSet(&source);
  RunLoader(state, dataset,
            *TransformPipeline::Builder()
                 .ToFloat()
                 .Normalize({kFashionMnistMean}, {kFashionMnistStd})
                 .Build(),
            Options(static_cast<int>(state.range(0))),
            absl::StrCat(source, ", normalize precomputed"));
}
BENCHMARK(BM_LoaderFashionMnist)
    ->ArgName("workers")
    ->Arg(0)
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime();

// The same transforms run per batch (as when the dataset does not fit the
// precompute budget).
void BM_LoaderFashionMnistNotPrecomputed(benchmark::State& state) {
  std::string source;
  const Dataset& dataset = TrainSet(&source);
  LoaderOptions options = Options(static_cast<int>(state.range(0)));
  options.precompute_limit_bytes = 0;
  RunLoader(state, dataset,
            *TransformPipeline::Builder()
                 .ToFloat()
                 .Normalize({kFashionMnistMean}, {kFashionMnistStd})
                 .Build(),
            options, absl::StrCat(source, ", normalize per batch"));
}
BENCHMARK(BM_LoaderFashionMnistNotPrecomputed)
    ->ArgName("workers")
    ->Arg(0)
    ->UseRealTime();

// With per-example augmentation: random crop (padding 2) and flip per batch.
void BM_LoaderFashionMnistAugmented(benchmark::State& state) {
  std::string source;
  const Dataset& dataset = TrainSet(&source);
  RunLoader(state, dataset,
            *TransformPipeline::Builder()
                 .ToFloat()
                 .Normalize({kFashionMnistMean}, {kFashionMnistStd})
                 .RandomCrop(28, 28, 2)
                 .RandomHorizontalFlip()
                 .Build(),
            Options(static_cast<int>(state.range(0))),
            absl::StrCat(source, ", crop + flip per batch"));
}
BENCHMARK(BM_LoaderFashionMnistAugmented)
    ->ArgName("workers")
    ->Arg(0)
    ->Arg(2)
    ->UseRealTime();

// The ResNet-18 tutorial's STL-10 pipeline on synthetic 3x96x96 images
// (batch 32): resize to 224, flip, ToFloat, normalize. precompute:1 resizes
// the whole set once, kept as uint8 (what the loader does when it fits its
// budget: 750 MB for STL-10's 5,000 training images); precompute:0 resizes
// every batch.
void BM_LoaderStl10Resize224(benchmark::State& state) {
  static const Dataset* dataset = [] {
    SyntheticOptions o;
    o.size = 512;
    o.channels = 3;
    o.height = 96;
    o.width = 96;
    return new Dataset(*MakeSyntheticDataset(o));
  }();
  LoaderOptions options = Options(static_cast<int>(state.range(0)));
  options.batch_size = 32;
  const bool precompute = state.range(1) != 0;
  if (!precompute) options.precompute_limit_bytes = 0;
  RunLoader(
      state, *dataset,
      *TransformPipeline::Builder()
           .Resize(224, 224)
           .RandomHorizontalFlip()
           .ToFloat()
           .Normalize({kImageNetMean[0], kImageNetMean[1], kImageNetMean[2]},
                      {kImageNetStd[0], kImageNetStd[1], kImageNetStd[2]})
           .Build(),
      options,
      precompute ? "synthetic 3x96x96, resized once; flip, float, "
                   "normalize per batch of 32"
                 : "synthetic 3x96x96, all per batch of 32");
}
BENCHMARK(BM_LoaderStl10Resize224)
    ->ArgNames({"workers", "precompute"})
    ->Args({0, 0})
    ->Args({2, 0})
    ->Args({0, 1})
    ->Args({2, 1})
    ->UseRealTime();

// Once per run: decoding the gzip-compressed IDX files (47 MB of pixels).
void BM_ReadFashionMnistTrain(benchmark::State& state) {
  int64_t bytes = 0;
  for (auto _ : state) {
    absl::StatusOr<Dataset> d = LoadMnist(kFashionMnistDir, Split::kTrain);
    if (!d.ok()) {
      state.SkipWithError(
          "Fashion-MNIST is not installed "
          "(dataset-fashion-mnist)");
      break;
    }
    bytes += d->images().nbytes();
  }
  state.SetBytesProcessed(bytes);
}
BENCHMARK(BM_ReadFashionMnistTrain)->Unit(benchmark::kMillisecond);

// Once per epoch: randperm(60000) and this rank's indices.
void BM_SamplerSetEpoch(benchmark::State& state) {
  DistributedSamplerOptions o;
  o.num_replicas = 4;
  DistributedSampler sampler = *DistributedSampler::Create(state.range(0), o);
  int64_t epoch = 0;
  for (auto _ : state) {
    sampler.SetEpoch(++epoch);
    benchmark::DoNotOptimize(sampler.indices().data());
  }
}
BENCHMARK(BM_SamplerSetEpoch)->Arg(60000)->Unit(benchmark::kMicrosecond);

// ImageFolder. The images are a smooth pattern plus seeded noise of +-24
// levels per sample, a stand-in for the texture of photographs (decoding
// costs grow with detail; flat synthetic images would flatter both codecs).
// JPEG at quality 90 with 4:4:4 sampling, PNG at zlib's default level.
testing::Pixels PhotoLike(int64_t height, int64_t width, uint64_t seed) {
  testing::Pixels p = testing::TestPattern(height, width, seed);
  internal::SplitMix64 rng(seed);
  for (uint8_t& v : p.samples) {
    const int x = v + static_cast<int>(rng.Uniform(49)) - 24;
    v = static_cast<uint8_t>(x < 0 ? 0 : x > 255 ? 255 : x);
  }
  return p;
}

std::string Encode(bool png, int64_t height, int64_t width, uint64_t seed) {
  const testing::Pixels p = PhotoLike(height, width, seed);
  return png ? *testing::EncodePng(p) : *testing::EncodeJpeg(p, 90);
}

// One core decoding one image over and over: images/s per core.
void BM_DecodeImage(benchmark::State& state) {
  const bool png = state.range(0) != 0;
  const int64_t width = state.range(1), height = state.range(2);
  const std::string bytes = Encode(png, height, width, 1);
  for (auto _ : state) {
    absl::StatusOr<RgbImage> image = DecodeImage(bytes, "bench");
    if (!image.ok()) {
      state.SkipWithError(std::string(image.status().message()).c_str());
      break;
    }
    benchmark::DoNotOptimize(image->pixels.data());
  }
  state.counters["images_per_s"] = benchmark::Counter(
      static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.SetLabel(absl::StrCat(png ? "PNG " : "JPEG q90 ", width, "x", height,
                              ", ", bytes.size() / 1024, " KiB"));
}
BENCHMARK(BM_DecodeImage)
    ->ArgNames({"png", "w", "h"})
    ->Args({0, 500, 375})
    ->Args({0, 224, 224})
    ->Args({1, 500, 375})
    ->Args({1, 224, 224})
    ->UseRealTime();

// A folder of 32 images of 500 x 375 (ImageNet's typical size) in two
// classes, all JPEG or all PNG, in a temporary folder removed at exit.
class BenchFolder {
 public:
  explicit BenchFolder(bool png) {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ =
        absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/dtrain_bench_XXXXXX");
    root_ = mkdtemp(templ.data()) != nullptr ? templ : "";
    for (int c = 0; c < 2 && !root_.empty(); ++c) {
      const std::string dir = absl::StrCat(root_, "/class", c);
      std::filesystem::create_directory(dir);
      for (int i = 0; i < 16; ++i) {
        std::ofstream(absl::StrCat(dir, "/", i, png ? ".png" : ".jpg"),
                      std::ios::binary)
            << Encode(png, 375, 500, c * 100 + i);
      }
    }
  }
  ~BenchFolder() {
    std::error_code ignored;
    if (!root_.empty()) std::filesystem::remove_all(root_, ignored);
  }
  const std::string& root() const { return root_; }

 private:
  std::string root_;
};

const std::string& FolderRoot(bool png) {
  static BenchFolder jpeg(false);
  static BenchFolder png_folder(true);
  return png ? png_folder.root() : jpeg.root();
}

// The whole per-example pipeline through the loader, batches of 16: read the
// file (from the page cache), decode, RandomResizedCrop(224) and flip (train)
// or Resize(256) + CenterCrop(224) (val), ToFloat + Normalize. workers:0 is
// one core.
void BM_LoaderImageFolder(benchmark::State& state) {
  const bool png = state.range(0) != 0;
  const bool train = state.range(1) != 0;
  at::set_num_threads(1);
  ImageFolderOptions o;
  o.transform = train ? *RandomResizedCrop(224) : *ResizeCenterCrop(256, 224);
  absl::StatusOr<std::shared_ptr<const ImageFolder>> folder =
      ImageFolder::Open(FolderRoot(png), o);
  if (!folder.ok()) {
    state.SkipWithError(std::string(folder.status().message()).c_str());
    return;
  }
  TransformPipeline::Builder builder;
  if (train) builder.RandomHorizontalFlip();
  builder.ToFloat().Normalize(
      {kImageNetMean[0], kImageNetMean[1], kImageNetMean[2]},
      {kImageNetStd[0], kImageNetStd[1], kImageNetStd[2]});
  LoaderOptions options = Options(static_cast<int>(state.range(2)));
  options.batch_size = 16;
  std::unique_ptr<DataLoader> loader = *DataLoader::Create(
      *folder, Sampler((*folder)->size()), *builder.Build(), options);
  int64_t epoch = 0;
  int64_t samples = 0;
  for (auto _ : state) {
    absl::StatusOr<absl::optional<Batch>> batch = loader->Next();
    if (batch.ok() && !batch->has_value()) {
      loader->SetEpoch(++epoch);
      batch = loader->Next();
    }
    if (!batch.ok()) {
      state.SkipWithError(std::string(batch.status().message()).c_str());
      break;
    }
    samples += (*batch)->labels.size(0);
    benchmark::DoNotOptimize((*batch)->images.data_ptr());
  }
  state.counters["samples_per_s"] = benchmark::Counter(
      static_cast<double>(samples), benchmark::Counter::kIsRate);
  state.SetLabel(absl::StrCat(
      png ? "PNG" : "JPEG", " 500x375 -> ",
      train ? "RandomResizedCrop(224) + flip" : "Resize(256) + CenterCrop(224)",
      ", normalize"));
}
BENCHMARK(BM_LoaderImageFolder)
    ->ArgNames({"png", "train", "workers"})
    ->Args({0, 1, 0})
    ->Args({0, 0, 0})
    ->Args({1, 1, 0})
    ->Args({1, 0, 0})
    ->Args({0, 1, 2})
    ->UseRealTime();

}  // namespace
}  // namespace dtrain::data
