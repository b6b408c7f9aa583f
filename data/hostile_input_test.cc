// Randomized hostile input for the file readers: thousands of mutations of
// valid IDX and STL-10 files (truncations, flipped and random bytes, huge
// header sizes, garbage appended, gzip damage). Every one must give either a
// valid dataset or an error, never a crash, a hang or an unbounded
// allocation; run it under --config=asan too. Seeded, so a failure repeats.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "data/idx.h"
#include "data/stl10.h"
#include "data/test_util.h"
#include "gtest/gtest.h"

namespace dtrain::data {
namespace {

constexpr int kMutationsPerFile = 1500;

// One random mutation of `bytes`.
std::string Mutate(const std::string& bytes, std::mt19937_64& rng) {
  std::string out = bytes;
  auto pick = [&](size_t n) {
    return n == 0 ? 0 : static_cast<size_t>(rng() % n);
  };
  switch (rng() % 6) {
    case 0:  // truncate anywhere, the header included
      out.resize(pick(out.size() + 1));
      break;
    case 1:  // flip a few bits
      for (int i = 0, n = 1 + static_cast<int>(rng() % 4);
           i < n && !out.empty(); ++i)
        out[pick(out.size())] ^= static_cast<char>(1 << (rng() % 8));
      break;
    case 2:  // overwrite a header byte (type, rank, sizes) with anything
      if (!out.empty())
        out[pick(std::min<size_t>(out.size(), 24))] =
            static_cast<char>(rng() & 0xff);
      break;
    case 3:  // huge size in a header word
      if (out.size() >= 8) {
        const size_t at =
            4 * (1 + pick(std::min<size_t>(out.size() / 4, 5) - 1));
        for (int i = 0; i < 4 && at + i < out.size(); ++i)
          out[at + i] = static_cast<char>(0xff);
      }
      break;
    case 4:  // garbage appended
      for (int i = 0, n = 1 + static_cast<int>(rng() % 64); i < n; ++i)
        out.push_back(static_cast<char>(rng() & 0xff));
      break;
    default:  // all random, same length
      for (char& c : out) c = static_cast<char>(rng() & 0xff);
      break;
  }
  return out;
}

struct Outcome {
  int ok = 0;
  int rejected = 0;
};

TEST(HostileInputTest, MutatedIdxFilesAreReadOrRejected) {
  const std::string dir = testing::MakeTempDir();
  const std::string images = testing::IdxImages(6, 5, 4);
  const std::string labels = testing::IdxLabels({0, 1, 2, 3, 4, 5});
  std::mt19937_64 rng(20261122);
  Outcome outcome;
  for (int i = 0; i < kMutationsPerFile; ++i) {
    const bool gzip = i % 3 == 0;
    const bool mutate_images = i % 2 == 0;
    std::string img = mutate_images ? Mutate(images, rng) : images;
    std::string lab = mutate_images ? labels : Mutate(labels, rng);
    if (gzip) {
      img = testing::Gzip(img);
      lab = testing::Gzip(lab);
      // Damage the compressed stream itself now and then.
      if (i % 9 == 0) img = Mutate(img, rng);
    }
    const std::string img_path = absl::StrCat(dir, "/img", gzip ? ".gz" : "");
    const std::string lab_path = absl::StrCat(dir, "/lab", gzip ? ".gz" : "");
    testing::WriteFile(img_path, img);
    testing::WriteFile(lab_path, lab);
    absl::StatusOr<Dataset> d = ReadIdxDataset(img_path, lab_path, 10, "fuzz");
    if (d.ok()) {
      ++outcome.ok;
      EXPECT_EQ(d->images().size(0), d->labels().size(0));
    } else {
      ++outcome.rejected;
      EXPECT_FALSE(d.status().message().empty());
    }
  }
  // Most mutations break the file; some (a flipped pixel) do not.
  EXPECT_GT(outcome.rejected, kMutationsPerFile / 2);
  EXPECT_GT(outcome.ok, 0);
  std::printf("IDX: %d mutations, %d read, %d rejected\n", kMutationsPerFile,
              outcome.ok, outcome.rejected);
}

TEST(HostileInputTest, MutatedStl10FilesAreReadOrRejected) {
  const std::string dir = testing::MakeTempDir();
  constexpr int kImages = 3;
  std::string images(kImages * 3 * 96 * 96, '\0');
  for (size_t i = 0; i < images.size(); ++i)
    images[i] = static_cast<char>(i * 13);
  const std::string labels = {1, 5, 10};
  std::mt19937_64 rng(96);
  Outcome outcome;
  for (int i = 0; i < kMutationsPerFile / 3; ++i) {
    const bool mutate_images = i % 2 == 0;
    testing::WriteFile(dir + "/x.bin",
                       mutate_images ? Mutate(images, rng) : images);
    testing::WriteFile(dir + "/y.bin",
                       mutate_images ? labels : Mutate(labels, rng));
    absl::StatusOr<Dataset> d =
        ReadStl10Files(dir + "/x.bin", dir + "/y.bin", "fuzz");
    if (d.ok()) {
      ++outcome.ok;
      EXPECT_EQ(d->images().size(0), d->labels().size(0));
    } else {
      ++outcome.rejected;
    }
  }
  EXPECT_GT(outcome.rejected, 0);
  std::printf("STL-10: %d mutations, %d read, %d rejected\n",
              kMutationsPerFile / 3, outcome.ok, outcome.rejected);
}

}  // namespace
}  // namespace dtrain::data
