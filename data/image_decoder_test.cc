#include "data/image_decoder.h"

#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "data/image_encoder.h"
#include "data/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::data {
namespace {

using testing::EncodeJpeg;
using testing::EncodePng;
using ::testing::HasSubstr;
using testing::Pixels;
using testing::TestPattern;

// `channels` samples per pixel, sample s of pixel i being (i * 37 + s * 91)
// mod 256 (mod 65536 scaled for 16 bits).
Pixels Samples(int64_t h, int64_t w, int channels, int bit_depth = 8) {
  Pixels p;
  p.height = h;
  p.width = w;
  p.channels = channels;
  p.bit_depth = bit_depth;
  for (int64_t i = 0; i < h * w; ++i) {
    for (int s = 0; s < channels; ++s) {
      const uint8_t v = static_cast<uint8_t>(i * 37 + s * 91 + i / w);
      p.samples.push_back(v);
      // 16 bits: v * 257, which scales back to exactly v.
      if (bit_depth == 16) p.samples.push_back(v);
    }
  }
  return p;
}

// The RGB that .convert("RGB") makes of `p` (8-bit samples).
std::vector<uint8_t> ExpectedRgb(const Pixels& p) {
  std::vector<uint8_t> rgb;
  const int step = p.bit_depth / 8;
  for (int64_t i = 0; i < p.height * p.width; ++i) {
    const uint8_t* px = &p.samples[i * p.channels * step];
    for (int c = 0; c < 3; ++c) {
      const int s = p.channels <= 2 ? 0 : c;
      rgb.push_back(px[s * step]);
    }
  }
  return rgb;
}

struct PngCase {
  int channels;
  int bit_depth;
  bool interlaced;
};

class PngRoundTrip : public ::testing::TestWithParam<PngCase> {};

TEST_P(PngRoundTrip, DecodesExactlyToRgb) {
  const PngCase c = GetParam();
  for (auto [h, w] : {std::pair<int, int>{1, 1}, {7, 13}, {40, 31}}) {
    const Pixels p = Samples(h, w, c.channels, c.bit_depth);
    absl::StatusOr<std::string> png = EncodePng(p, c.interlaced);
    ASSERT_TRUE(png.ok()) << png.status();
    EXPECT_EQ(SniffImageFormat(*png), ImageFormat::kPng);
    absl::StatusOr<RgbImage> image = DecodeImage(*png, "x.png");
    ASSERT_TRUE(image.ok()) << image.status();
    EXPECT_EQ(image->height, h);
    EXPECT_EQ(image->width, w);
    EXPECT_EQ(image->pixels, ExpectedRgb(p)) << h << " x " << w;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, PngRoundTrip,
    ::testing::Values(PngCase{3, 8, false}, PngCase{1, 8, false},
                      PngCase{2, 8, false}, PngCase{4, 8, false},
                      PngCase{3, 16, false}, PngCase{1, 16, false},
                      PngCase{4, 16, false}, PngCase{3, 8, true},
                      PngCase{4, 16, true}));

TEST(PngDecodeTest, PaletteImagesExpandToTheirColours) {
  Pixels p = TestPattern(20, 30, 5);
  for (uint8_t& s : p.samples) s &= 0xc0;  // At most 64 colours.
  absl::StatusOr<std::string> png = EncodePng(p, false, /*palette=*/true);
  ASSERT_TRUE(png.ok()) << png.status();
  absl::StatusOr<RgbImage> image = DecodePng(*png, "p.png");
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->pixels, p.samples);
}

// Max and mean absolute difference between two equally long byte arrays.
std::pair<int, double> Difference(const std::vector<uint8_t>& a,
                                  const std::vector<uint8_t>& b) {
  int max = 0;
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const int d = std::abs(int{a[i]} - int{b[i]});
    max = std::max(max, d);
    sum += d;
  }
  return {max, sum / a.size()};
}

TEST(JpegDecodeTest, QualityHundredIsCloseToWhatWasEncoded) {
  for (auto [h, w] : {std::pair<int, int>{1, 1}, {17, 9}, {64, 80}}) {
    const Pixels p = TestPattern(h, w, h * 100 + w);
    absl::StatusOr<std::string> jpeg = EncodeJpeg(p, 100);
    ASSERT_TRUE(jpeg.ok()) << jpeg.status();
    EXPECT_EQ(SniffImageFormat(*jpeg), ImageFormat::kJpeg);
    absl::StatusOr<RgbImage> image = DecodeImage(*jpeg, "x.jpg");
    ASSERT_TRUE(image.ok()) << image.status();
    ASSERT_EQ(image->height, h);
    ASSERT_EQ(image->width, w);
    ASSERT_EQ(image->pixels.size(), p.samples.size());
    auto [max, mean] = Difference(image->pixels, p.samples);
    EXPECT_LE(max, 6) << h << " x " << w;
    EXPECT_LE(mean, 1.5) << h << " x " << w;
  }
}

TEST(JpegDecodeTest, ProgressiveJpegsDecodeAlike) {
  const Pixels p = TestPattern(45, 61, 8);
  absl::StatusOr<std::string> jpeg = EncodeJpeg(p, 100, /*progressive=*/true);
  ASSERT_TRUE(jpeg.ok()) << jpeg.status();
  absl::StatusOr<RgbImage> image = DecodeJpeg(*jpeg, "p.jpg");
  ASSERT_TRUE(image.ok()) << image.status();
  auto [max, mean] = Difference(image->pixels, p.samples);
  EXPECT_LE(max, 6);
  EXPECT_LE(mean, 1.5);
}

// Adobe's CMYK JPEGs hold inverted inks, R = C * K / 255: with K = 255 the
// stored C, M, Y are the R, G, B that come out.
TEST(JpegDecodeTest, AdobeCmykBecomesRgb) {
  const Pixels rgb = TestPattern(16, 24, 9);
  Pixels cmyk = rgb;
  cmyk.channels = 4;
  cmyk.samples.clear();
  for (size_t i = 0; i < rgb.samples.size(); i += 3) {
    cmyk.samples.insert(cmyk.samples.end(), &rgb.samples[i],
                        &rgb.samples[i] + 3);
    cmyk.samples.push_back(255);
  }
  absl::StatusOr<std::string> jpeg = EncodeJpeg(cmyk, 100);
  ASSERT_TRUE(jpeg.ok()) << jpeg.status();
  absl::StatusOr<RgbImage> image = DecodeJpeg(*jpeg, "cmyk.jpg");
  ASSERT_TRUE(image.ok()) << image.status();
  auto [max, mean] = Difference(image->pixels, rgb.samples);
  EXPECT_LE(max, 6);
  EXPECT_LE(mean, 1.5);
}

TEST(JpegDecodeTest, GrayscaleBecomesThreeEqualChannels) {
  Pixels gray;
  gray.height = 24;
  gray.width = 20;
  gray.channels = 1;
  for (int i = 0; i < 24 * 20; ++i) gray.samples.push_back(60 + i % 20 * 5);
  absl::StatusOr<std::string> jpeg = EncodeJpeg(gray, 100);
  ASSERT_TRUE(jpeg.ok()) << jpeg.status();
  absl::StatusOr<RgbImage> image = DecodeJpeg(*jpeg, "g.jpg");
  ASSERT_TRUE(image.ok()) << image.status();
  for (int i = 0; i < 24 * 20; ++i) {
    EXPECT_EQ(image->pixels[3 * i], image->pixels[3 * i + 1]);
    EXPECT_EQ(image->pixels[3 * i], image->pixels[3 * i + 2]);
    EXPECT_NEAR(image->pixels[3 * i], gray.samples[i], 3);
  }
}

TEST(DecodeImageTest, OtherBytesAreRefusedNamingTheFile) {
  for (const std::string& bytes :
       {std::string(), std::string("GIF89a......"), std::string("\xff\xd8")}) {
    absl::StatusOr<RgbImage> image = DecodeImage(bytes, "/data/cat/readme.jpg");
    EXPECT_EQ(image.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(image.status().message(),
                HasSubstr("/data/cat/readme.jpg: not a JPEG or PNG"));
  }
}

// A PNG whose IHDR declares width x height (CRC fixed up), data unchanged.
std::string WithPngSize(std::string png, uint32_t width, uint32_t height) {
  for (int i = 0; i < 4; ++i) {
    png[16 + i] = static_cast<char>(width >> (24 - 8 * i));
    png[20 + i] = static_cast<char>(height >> (24 - 8 * i));
  }
  const uint32_t crc =
      crc32(0, reinterpret_cast<const Bytef*>(png.data() + 12), 17);
  for (int i = 0; i < 4; ++i)
    png[29 + i] = static_cast<char>(crc >> (24 - 8 * i));
  return png;
}

// A baseline JPEG whose SOF0 declares width x height.
std::string WithJpegSize(std::string jpeg, uint16_t width, uint16_t height) {
  for (size_t i = 2; i + 9 < jpeg.size(); ++i) {
    if (static_cast<uint8_t>(jpeg[i]) == 0xff &&
        static_cast<uint8_t>(jpeg[i + 1]) == 0xc0) {
      jpeg[i + 5] = static_cast<char>(height >> 8);
      jpeg[i + 6] = static_cast<char>(height);
      jpeg[i + 7] = static_cast<char>(width >> 8);
      jpeg[i + 8] = static_cast<char>(width);
      return jpeg;
    }
  }
  ADD_FAILURE() << "no SOF0 marker";
  return jpeg;
}

TEST(DecodeImageTest, HugeDeclaredSizesAreRefusedBeforeDecoding) {
  const Pixels p = TestPattern(8, 8, 1);
  const std::string png = WithPngSize(*EncodePng(p), 60000, 60000);
  absl::StatusOr<RgbImage> image = DecodeImage(png, "bomb.png");
  EXPECT_EQ(image.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(image.status().message(), HasSubstr("bomb.png"));
  EXPECT_THAT(image.status().message(), HasSubstr("decompression bomb"));

  const std::string wide = WithPngSize(*EncodePng(p), 0x7fffffff, 1);
  image = DecodeImage(wide, "wide.png");
  EXPECT_FALSE(image.ok());
  EXPECT_THAT(image.status().message(), HasSubstr("wide.png"));

  const std::string jpeg = WithJpegSize(*EncodeJpeg(p, 90), 65000, 65000);
  image = DecodeImage(jpeg, "bomb.jpg");
  EXPECT_EQ(image.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(image.status().message(), HasSubstr("bomb.jpg"));
  EXPECT_THAT(image.status().message(), HasSubstr("decompression bomb"));

  // Within the limits, but more than 8 x 8 pixels of file could hold.
  const std::string liar = WithPngSize(*EncodePng(p), 10000, 10000);
  image = DecodeImage(liar, "liar.png");
  EXPECT_EQ(image.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(image.status().message(), HasSubstr("liar.png"));
  EXPECT_THAT(image.status().message(), HasSubstr("1032:1"));
  // While a large flat image, near deflate's best ratio, decodes.
  Pixels black;
  black.height = 1500;
  black.width = 2000;
  black.samples.assign(1500 * 2000 * 3, 0);
  const std::string flat = *EncodePng(black);
  image = DecodeImage(flat, "black.png");
  ASSERT_TRUE(image.ok()) << image.status() << " (" << flat.size() << " bytes)";
  EXPECT_EQ(image->pixels, black.samples);

  // Smaller limits apply as given.
  DecodeLimits limits;
  limits.max_pixels = 63;
  EXPECT_FALSE(DecodeImage(*EncodePng(p), "x.png", limits).ok());
  EXPECT_FALSE(DecodeImage(*EncodeJpeg(p, 90), "x.jpg", limits).ok());
  limits.max_pixels = 64;
  EXPECT_TRUE(DecodeImage(*EncodePng(p), "x.png", limits).ok());
  EXPECT_TRUE(DecodeImage(*EncodeJpeg(p, 90), "x.jpg", limits).ok());
}

TEST(DecodeImageTest, TruncatedFilesAreErrorsNamingTheFile) {
  const Pixels p = TestPattern(33, 47, 2);
  for (const std::string& file :
       {*EncodePng(p), *EncodePng(p, true), *EncodeJpeg(p, 95),
        *EncodeJpeg(p, 50), *EncodeJpeg(p, 80, /*progressive=*/true)}) {
    for (size_t n = 0; n < file.size(); n += 1 + n / 16) {
      absl::StatusOr<RgbImage> image =
          DecodeImage(file.substr(0, n), "cut.img");
      ASSERT_FALSE(image.ok()) << n << " of " << file.size() << " bytes";
      EXPECT_EQ(image.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(image.status().message(), HasSubstr("cut.img: "));
    }
  }
}

// Seeded random damage: every result is an image of the declared size or an
// error naming the file; nothing crashes (the ASan build runs this too).
TEST(DecodeImageTest, DamagedAndRandomBytesNeverCrash) {
  const Pixels p = TestPattern(40, 52, 3);
  const std::vector<std::string> files = {
      *EncodePng(p), *EncodePng(p, true), *EncodeJpeg(p, 95),
      *EncodeJpeg(p, 30), *EncodeJpeg(p, 90, /*progressive=*/true)};
  internal::SplitMix64 rng(7);
  int decoded = 0, refused = 0;
  for (int round = 0; round < 1500; ++round) {
    std::string bytes = files[round % files.size()];
    const int flips = 1 + static_cast<int>(rng.Uniform(8));
    for (int f = 0; f < flips; ++f) {
      // Mostly in the headers, where the interesting fields are.
      const size_t at = rng.Uniform(2) == 0
                            ? rng.Uniform(std::min<size_t>(bytes.size(), 200))
                            : rng.Uniform(bytes.size());
      bytes[at] = static_cast<char>(rng.Next());
    }
    absl::StatusOr<RgbImage> image = DecodeImage(bytes, "noise");
    if (image.ok()) {
      ++decoded;
      EXPECT_EQ(static_cast<int64_t>(image->pixels.size()),
                image->height * image->width * 3);
    } else {
      ++refused;
      EXPECT_THAT(image.status().message(), HasSubstr("noise: "));
    }
  }
  for (int round = 0; round < 300; ++round) {
    std::string bytes(rng.Uniform(2000), '\0');
    for (char& b : bytes) b = static_cast<char>(rng.Next());
    // Half of them with a valid signature, so that the decoders see them.
    if (round % 2 == 0 && bytes.size() >= 8) {
      bytes.replace(0, 8,
                    round % 4 == 0
                        ? std::string("\x89PNG\r\n\x1a\n", 8)
                        : std::string("\xff\xd8\xff\xe0\x00\x10JF", 8));
    }
    EXPECT_FALSE(DecodeImage(bytes, "random").ok());
  }
  EXPECT_GT(refused, 0);
  SUCCEED() << decoded << " damaged files decoded, " << refused << " refused";
}

}  // namespace
}  // namespace dtrain::data
