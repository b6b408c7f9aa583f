#include "data/image_folder.h"

#include <ATen/ops/equal.h>
#include <sys/stat.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "data/distributed_sampler.h"
#include "data/image_encoder.h"
#include "data/image_transforms.h"
#include "data/loader.h"
#include "data/test_util.h"
#include "data/transforms.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::data {
namespace {

using ::dtrain::data::testing::EncodeJpeg;
using ::dtrain::data::testing::EncodePng;
using ::dtrain::data::testing::MakeTempDir;
using ::dtrain::data::testing::Pixels;
using ::dtrain::data::testing::TestPattern;
using ::dtrain::data::testing::Watchdog;
using ::dtrain::data::testing::WriteFile;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

void MakeDir(const std::string& path) {
  ASSERT_EQ(::mkdir(path.c_str(), 0755), 0) << path;
}

// What a test wrote: the file and the RGB it should decode to.
struct Written {
  std::string path;
  int64_t label;
  Pixels rgb;
  bool exact;  // PNG: exact; JPEG: within a few levels.
};

Pixels Gray(const Pixels& rgb) {
  Pixels g = rgb;
  g.channels = 1;
  g.samples.clear();
  for (size_t i = 0; i < rgb.samples.size(); i += 3) {
    g.samples.push_back(rgb.samples[i + 1]);
  }
  return g;
}

Pixels GrayAsRgb(const Pixels& gray) {
  Pixels p = gray;
  p.channels = 3;
  p.samples.clear();
  for (uint8_t v : gray.samples) p.samples.insert(p.samples.end(), 3, v);
  return p;
}

Pixels WithAlpha(const Pixels& rgb) {
  Pixels p = rgb;
  p.channels = 4;
  p.samples.clear();
  for (size_t i = 0; i < rgb.samples.size(); i += 3) {
    p.samples.insert(p.samples.end(), &rgb.samples[i], &rgb.samples[i] + 3);
    p.samples.push_back(static_cast<uint8_t>(i * 7));
  }
  return p;
}

class ImageFolderTest : public ::testing::Test {
 protected:
  // root/a_cat: 1.png (RGB), 2.JPG, notes.txt (ignored), sub/3.png (gray);
  // root/b_dog: x.jpeg (gray JPEG), y.PNG (RGBA), z.png (16-bit RGB).
  // Every image has a size of its own.
  void SetUp() override {
    MakeDir(root_ + "/b_dog");
    MakeDir(root_ + "/a_cat");
    MakeDir(root_ + "/a_cat/sub");
    const Pixels p1 = TestPattern(20, 30, 1);
    Add("a_cat/1.png", 0, p1, *EncodePng(p1), true);
    const Pixels p2 = TestPattern(41, 25, 2);
    Add("a_cat/2.JPG", 0, p2, *EncodeJpeg(p2, 100), false);
    WriteFile(root_ + "/a_cat/notes.txt", "not an image");
    const Pixels p3 = Gray(TestPattern(17, 33, 3));
    Add("a_cat/sub/3.png", 0, GrayAsRgb(p3), *EncodePng(p3), true);
    const Pixels p4 = Gray(TestPattern(28, 28, 4));
    Add("b_dog/x.jpeg", 1, GrayAsRgb(p4), *EncodeJpeg(p4, 100), false);
    const Pixels p5 = TestPattern(50, 12, 5);
    Add("b_dog/y.PNG", 1, p5, *EncodePng(WithAlpha(p5)), true);
    const Pixels p6 = TestPattern(9, 64, 6);
    Pixels p6_16 = p6;
    p6_16.bit_depth = 16;
    p6_16.samples.clear();
    for (uint8_t v : p6.samples)
      p6_16.samples.insert(p6_16.samples.end(), 2, v);
    Add("b_dog/z.png", 1, p6, *EncodePng(p6_16), true);
  }

  void Add(const std::string& name, int64_t label, Pixels rgb,
           const std::string& bytes, bool exact) {
    const std::string path = root_ + "/" + name;
    WriteFile(path, bytes);
    written_.push_back({path, label, std::move(rgb), exact});
  }

  static ImageFolderOptions Options(std::shared_ptr<const ImageTransform> t) {
    ImageFolderOptions o;
    o.transform = std::move(t);
    return o;
  }

  std::shared_ptr<const ImageFolder> Open(
      std::shared_ptr<const ImageTransform> t) {
    absl::StatusOr<std::shared_ptr<const ImageFolder>> folder =
        ImageFolder::Open(root_, Options(std::move(t)));
    EXPECT_TRUE(folder.ok()) << folder.status();
    return folder.ok() ? *std::move(folder) : nullptr;
  }

  Watchdog watchdog_{absl::Seconds(60)};
  const std::string root_ = MakeTempDir();
  std::vector<Written> written_;
};

TEST_F(ImageFolderTest, ListsClassesAndFilesInTorchvisionsOrder) {
  std::shared_ptr<const ImageFolder> folder = Open(*ResizeCenterCrop(16, 16));
  ASSERT_NE(folder, nullptr);
  EXPECT_THAT(folder->classes(), ElementsAre("a_cat", "b_dog"));
  EXPECT_EQ(folder->num_classes(), 2);
  ASSERT_EQ(folder->size(), 6);
  EXPECT_EQ(folder->ignored_files(), 1);
  for (int64_t i = 0; i < 6; ++i) {
    EXPECT_EQ(folder->path(i), written_[i].path);
    EXPECT_EQ(folder->label(i), written_[i].label);
  }
  EXPECT_THAT(folder->example_shape(), ElementsAre(3, 16, 16));
  EXPECT_THAT(folder->DebugString(), HasSubstr("6 images in 2 classes"));
}

TEST_F(ImageFolderTest, DecodesWhatWasEncoded) {
  std::shared_ptr<const ImageFolder> folder = Open(*ResizeCenterCrop(16, 16));
  ASSERT_NE(folder, nullptr);
  for (int64_t i = 0; i < folder->size(); ++i) {
    absl::StatusOr<RgbImage> image = folder->Decode(i);
    ASSERT_TRUE(image.ok()) << image.status();
    const Pixels& want = written_[i].rgb;
    ASSERT_EQ(image->height, want.height) << folder->path(i);
    ASSERT_EQ(image->width, want.width) << folder->path(i);
    if (written_[i].exact) {
      EXPECT_EQ(image->pixels, want.samples) << folder->path(i);
      continue;
    }
    int max = 0;
    for (size_t j = 0; j < want.samples.size(); ++j) {
      max = std::max(max, std::abs(int{image->pixels[j]} - want.samples[j]));
    }
    EXPECT_LE(max, 6) << folder->path(i);
  }
}

TEST_F(ImageFolderTest, GatherTransformsEachImageToOneSize) {
  std::shared_ptr<const ImageTransform> t = *ResizeCenterCrop(16, 14);
  std::shared_ptr<const ImageFolder> folder = Open(t);
  ASSERT_NE(folder, nullptr);
  const std::vector<int64_t> indices = {5, 0, 3, 3};
  const std::vector<uint64_t> seeds = {1, 2, 3, 4};
  absl::StatusOr<Examples> ex = folder->Gather(indices, seeds);
  ASSERT_TRUE(ex.ok()) << ex.status();
  EXPECT_THAT(ex->images.sizes().vec(), ElementsAre(4, 3, 14, 14));
  EXPECT_EQ(ex->images.scalar_type(), at::kByte);
  EXPECT_THAT(std::vector<int64_t>(ex->labels.data_ptr<int64_t>(),
                                   ex->labels.data_ptr<int64_t>() + 4),
              ElementsAre(1, 0, 1, 1));
  for (int64_t k = 0; k < 4; ++k) {
    std::vector<uint8_t> want(3 * 14 * 14);
    ASSERT_TRUE(t->Apply(*folder->Decode(indices[k]), 0, want.data()).ok());
    const uint8_t* got = ex->images.data_ptr<uint8_t>() + k * want.size();
    EXPECT_EQ(std::vector<uint8_t>(got, got + want.size()), want) << k;
  }
  EXPECT_FALSE(folder->Gather({6}, {0}).ok());
  EXPECT_FALSE(folder->Gather({0, 1}, {0}).ok());
}

TEST_F(ImageFolderTest, SubsetKeepsTheClasses) {
  std::shared_ptr<const ImageFolder> folder = Open(*ResizeCenterCrop(8, 8));
  ASSERT_NE(folder, nullptr);
  absl::StatusOr<std::shared_ptr<const ImageFolder>> part =
      folder->Subset({5, 2});
  ASSERT_TRUE(part.ok()) << part.status();
  EXPECT_EQ((*part)->size(), 2);
  EXPECT_EQ((*part)->num_classes(), 2);
  EXPECT_EQ((*part)->path(0), written_[5].path);
  EXPECT_EQ((*part)->label(0), 1);
  EXPECT_EQ((*part)->path(1), written_[2].path);
  EXPECT_EQ((*part)->label(1), 0);
  EXPECT_FALSE(folder->Subset({0, 6}).ok());
  EXPECT_FALSE(folder->Subset({-1}).ok());
}

TransformPipeline Augment() {
  return *TransformPipeline::Builder()
              .RandomHorizontalFlip()
              .ToFloat()
              .Normalize({0.485, 0.456, 0.406}, {0.229, 0.224, 0.225})
              .Build();
}

// The batches of epochs 0 and 1 (with `restore`, from there on).
std::vector<Batch> TwoEpochs(std::shared_ptr<const ImageFolder> folder,
                             int workers,
                             const SamplerState* restore = nullptr) {
  DistributedSamplerOptions s;
  s.seed = 9;
  LoaderOptions o;
  o.batch_size = 4;
  o.num_workers = workers;
  o.seed = 5;
  absl::StatusOr<std::unique_ptr<DataLoader>> loader = DataLoader::Create(
      folder, *DistributedSampler::Create(folder->size(), s), Augment(), o);
  EXPECT_TRUE(loader.ok()) << loader.status();
  std::vector<Batch> out;
  if (!loader.ok()) return out;
  int64_t first = 0;
  if (restore != nullptr) {
    EXPECT_TRUE((*loader)->Restore(*restore).ok());
    first = restore->epoch;
  }
  for (int64_t epoch = first; epoch < 2; ++epoch) {
    (*loader)->SetEpoch(epoch);
    for (;;) {
      absl::StatusOr<absl::optional<Batch>> b = (*loader)->Next();
      EXPECT_TRUE(b.ok()) << b.status();
      if (!b.ok() || !b->has_value()) break;
      out.push_back(**std::move(b));
    }
  }
  return out;
}

TEST_F(ImageFolderTest, BatchesAreTheSameForAnyNumberOfWorkers) {
  std::shared_ptr<const ImageFolder> folder = Open(*RandomResizedCrop(12));
  ASSERT_NE(folder, nullptr);
  const std::vector<Batch> expected = TwoEpochs(folder, 0);
  ASSERT_EQ(expected.size(), 4u);
  EXPECT_THAT(expected[0].images.sizes().vec(), ElementsAre(4, 3, 12, 12));
  EXPECT_EQ(expected[0].images.scalar_type(), at::kFloat);
  // Epochs differ: another order and other crops.
  EXPECT_FALSE(at::equal(expected[0].images, expected[2].images));
  for (int workers : {1, 3}) {
    const std::vector<Batch> got = TwoEpochs(folder, workers);
    ASSERT_EQ(got.size(), expected.size()) << workers;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_TRUE(at::equal(got[i].images, expected[i].images))
          << workers << " workers, batch " << i;
      EXPECT_TRUE(at::equal(got[i].labels, expected[i].labels));
      EXPECT_TRUE(at::equal(got[i].indices, expected[i].indices));
    }
  }
}

TEST_F(ImageFolderTest, ResumedRunsContinueWithTheSameBatches) {
  std::shared_ptr<const ImageFolder> folder = Open(*RandomResizedCrop(12));
  ASSERT_NE(folder, nullptr);
  const std::vector<Batch> expected = TwoEpochs(folder, 0);
  ASSERT_EQ(expected.size(), 4u);
  // Stopped after the first batch of epoch 0 (4 of 6 examples).
  SamplerState state;
  state.epoch = 0;
  state.position = 4;
  state.dataset_size = 6;
  state.seed = 9;
  const std::vector<Batch> got = TwoEpochs(folder, 2, &state);
  ASSERT_EQ(got.size(), 3u);
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].position, expected[i + 1].position);
    EXPECT_TRUE(at::equal(got[i].images, expected[i + 1].images)) << i;
  }
}

TEST(ImageFolderErrorsTest, DamagedFilesAreErrorsNamingThem) {
  Watchdog watchdog(absl::Seconds(60));
  const std::string root = MakeTempDir();
  MakeDir(root + "/c");
  const Pixels p = TestPattern(10, 10, 1);
  WriteFile(root + "/c/a.png", *EncodePng(p));
  const std::string png = *EncodePng(p);
  WriteFile(root + "/c/b.png", png.substr(0, png.size() / 2));
  WriteFile(root + "/c/c.jpg", "this is no JPEG");
  ImageFolderOptions o;
  o.transform = *ResizeCenterCrop(8, 8);
  absl::StatusOr<std::shared_ptr<const ImageFolder>> folder =
      ImageFolder::Open(root, o);
  ASSERT_TRUE(folder.ok()) << folder.status();
  ASSERT_EQ((*folder)->size(), 3);
  absl::StatusOr<Examples> ex = (*folder)->Gather({0, 1}, {0, 0});
  EXPECT_EQ(ex.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ex.status().message(), HasSubstr(root + "/c/b.png: "));
  ex = (*folder)->Gather({2}, {0});
  EXPECT_THAT(ex.status().message(),
              HasSubstr(root + "/c/c.jpg: not a JPEG or PNG"));
  // Every damaged file of a batch is named, not only the first.
  ex = (*folder)->Gather({1, 0, 2}, {0, 0, 0});
  EXPECT_THAT(ex.status().message(),
              HasSubstr("2 of the batch's 3 images cannot be used: "));
  EXPECT_THAT(ex.status().message(), HasSubstr(root + "/c/b.png: "));
  EXPECT_THAT(ex.status().message(),
              HasSubstr(root + "/c/c.jpg: not a JPEG or PNG"));

  // Through the loader, with workers: the error names the file and batch.
  LoaderOptions lo;
  lo.batch_size = 3;
  lo.num_workers = 2;
  absl::StatusOr<std::unique_ptr<DataLoader>> loader = DataLoader::Create(
      *folder, *DistributedSampler::Create(3, DistributedSamplerOptions()),
      Augment(), lo);
  ASSERT_TRUE(loader.ok()) << loader.status();
  (*loader)->SetEpoch(0);
  absl::StatusOr<absl::optional<Batch>> batch = (*loader)->Next();
  ASSERT_FALSE(batch.ok());
  EXPECT_THAT(batch.status().message(), HasSubstr("batch at position 0"));
  EXPECT_THAT(batch.status().message(), HasSubstr(root + "/c/"));
}

TEST(ImageFolderErrorsTest, MissingEmptyAndClasslessFoldersNameThePath) {
  ImageFolderOptions o;
  o.transform = *ResizeCenterCrop(8, 8);
  const std::string root = MakeTempDir();
  absl::StatusOr<std::shared_ptr<const ImageFolder>> folder =
      ImageFolder::Open(root + "/missing", o);
  EXPECT_EQ(folder.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(folder.status().message(), HasSubstr(root + "/missing"));

  folder = ImageFolder::Open(root, o);
  EXPECT_EQ(folder.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(folder.status().message(), HasSubstr("no class folders"));

  MakeDir(root + "/full");
  WriteFile(root + "/full/a.png", *EncodePng(TestPattern(4, 4, 1)));
  MakeDir(root + "/empty");
  WriteFile(root + "/empty/readme.md", "only text");
  folder = ImageFolder::Open(root, o);
  EXPECT_EQ(folder.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(folder.status().message(),
              HasSubstr("class folder " + root + "/empty holds no images"));

  o.transform = nullptr;
  EXPECT_FALSE(ImageFolder::Open(root, o).ok());
}

TEST(ImageFolderErrorsTest, LinkCyclesAreVisitedOnce) {
  const std::string root = MakeTempDir();
  MakeDir(root + "/c");
  WriteFile(root + "/c/a.png", *EncodePng(TestPattern(4, 4, 1)));
  ASSERT_EQ(::symlink(".", (root + "/c/loop").c_str()), 0);
  ImageFolderOptions o;
  o.transform = *ResizeCenterCrop(8, 8);
  absl::StatusOr<std::shared_ptr<const ImageFolder>> folder =
      ImageFolder::Open(root, o);
  ASSERT_TRUE(folder.ok()) << folder.status();
  EXPECT_EQ((*folder)->size(), 1);
}

TEST(HasImageExtensionTest, JpegAndPngInAnyCase) {
  for (const char* name :
       {"a.jpg", "a.JPG", "b.jpeg", "b.JpEg", "c.png", "c.PNG", ".png"}) {
    EXPECT_TRUE(HasImageExtension(name)) << name;
  }
  for (const char* name : {"a.gif", "a.jpg.txt", "png", "a.pn", "a.webp"}) {
    EXPECT_FALSE(HasImageExtension(name)) << name;
  }
}

}  // namespace
}  // namespace dtrain::data
