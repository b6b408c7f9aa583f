#include "data/stl10.h"

#include <sys/stat.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "data/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::data {
namespace {

using ::dtrain::data::testing::Gzip;
using ::dtrain::data::testing::TempDirTest;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int kSide = 96;
constexpr int kImage = 3 * kSide * kSide;

// The byte the file holds for (image, channel, row, col): a value that
// identifies all four coordinates (mod 256).
uint8_t Pixel(int image, int channel, int row, int col) {
  return static_cast<uint8_t>(image * 101 + channel * 37 + row * 3 + col * 7);
}

// STL-10's layout: each channel column-major.
std::string Images(int n) {
  std::string out(static_cast<size_t>(n) * kImage, '\0');
  for (int i = 0; i < n; ++i) {
    for (int c = 0; c < 3; ++c) {
      for (int col = 0; col < kSide; ++col) {
        for (int row = 0; row < kSide; ++row) {
          out[i * kImage + c * kSide * kSide + col * kSide + row] =
              static_cast<char>(Pixel(i, c, row, col));
        }
      }
    }
  }
  return out;
}

using Stl10Test = TempDirTest;

TEST_F(Stl10Test, ReadsImagesRowMajorAndLabelsFromZero) {
  const std::string x = Write("train_X.bin", Images(3));
  const std::string y = Write("train_y.bin", std::string("\x01\x0a\x05", 3));
  absl::StatusOr<Dataset> d = ReadStl10Files(x, y, "stl10 tiny");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->images().sizes(), at::IntArrayRef({3, 3, 96, 96}));
  EXPECT_EQ(d->num_classes(), 10);
  EXPECT_EQ(d->labels()[0].item<int64_t>(), 0);
  EXPECT_EQ(d->labels()[1].item<int64_t>(), 9);
  EXPECT_EQ(d->labels()[2].item<int64_t>(), 4);
  const at::Tensor images = d->images();
  for (int i = 0; i < 3; ++i) {
    for (int c = 0; c < 3; ++c) {
      for (int row : {0, 1, 50, 95}) {
        for (int col : {0, 2, 77, 95}) {
          ASSERT_EQ(images[i][c][row][col].item<uint8_t>(),
                    Pixel(i, c, row, col))
              << i << " " << c << " " << row << " " << col;
        }
      }
    }
  }
}

TEST_F(Stl10Test, LoadsFromTheArchiveLayoutAndGzip) {
  ASSERT_EQ(::mkdir(absl::StrCat(dir_, "/stl10_binary").c_str(), 0755), 0);
  Write("stl10_binary/test_X.bin.gz", Gzip(Images(2)));
  Write("stl10_binary/test_y.bin.gz", Gzip(std::string("\x03\x04", 2)));
  absl::StatusOr<Dataset> d = LoadStl10(dir_, Split::kTest);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->size(), 2);
  EXPECT_EQ(d->labels()[1].item<int64_t>(), 3);
  EXPECT_EQ(d->images()[1][2][3][4].item<uint8_t>(), Pixel(1, 2, 3, 4));
}

TEST_F(Stl10Test, MissingFilesSayWhereToDownload) {
  absl::StatusOr<Dataset> d = LoadStl10(dir_, Split::kTrain);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(d.status().message(),
              AllOf(HasSubstr(dir_ + "/train_X.bin"),
                    HasSubstr(dir_ + "/stl10_binary/train_y.bin.gz"),
                    HasSubstr("stl10_binary.tar.gz")));
}

TEST_F(Stl10Test, RejectsBrokenFiles) {
  const std::string x = Write("x", Images(2));
  const std::string y = Write("y", std::string("\x01\x02", 2));
  struct Case {
    std::string images;
    std::string labels;
    std::string message;
  };
  const std::vector<Case> cases = {
      {Write("short", Images(2).substr(0, kImage + 100)), y,
       "27748 bytes is not a whole number of STL-10 images"},
      {x, Write("y3", std::string("\x01\x02\x03", 3)),
       "holds 2 images, " + dir_ + "/y3 holds 3 labels"},
      {x, Write("y0", std::string("\x01\x00", 2)),
       "label 0 of example 1 is outside 1..10"},
      {x, Write("y11", std::string("\x0b\x01", 2)),
       "label 11 of example 0 is outside 1..10"},
      {Write("xgz", Gzip(Images(2)).substr(0, 100)), y,
       "the gzip data is truncated"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<Dataset> d = ReadStl10Files(c.images, c.labels, "broken");
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument)
        << d.status();
    EXPECT_THAT(d.status().message(), HasSubstr(c.message));
  }
  EXPECT_EQ(ReadStl10Files(x, dir_ + "/none", "x").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace dtrain::data
