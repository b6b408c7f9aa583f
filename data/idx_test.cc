#include "data/idx.h"

#include <ATen/ops/equal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "data/input_file.h"
#include "data/mnist.h"
#include "data/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::data {
namespace {

using ::dtrain::data::testing::Gzip;
using ::dtrain::data::testing::IdxFile;
using ::dtrain::data::testing::IdxImages;
using ::dtrain::data::testing::IdxLabels;
using ::dtrain::data::testing::TempDirTest;
using ::testing::AllOf;
using ::testing::HasSubstr;

using IdxTest = TempDirTest;

TEST_F(IdxTest, ReadsRawUint8Images) {
  const std::string path = Write("images", IdxImages(3, 2, 4));
  absl::StatusOr<at::Tensor> t = ReadIdxFile(path);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->scalar_type(), at::kByte);
  EXPECT_EQ(t->sizes(), at::IntArrayRef({3, 2, 4}));
  const uint8_t* p = t->data_ptr<uint8_t>();
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 8; ++j) EXPECT_EQ(p[i * 8 + j], (i * 7 + j) % 256);
  }
}

TEST_F(IdxTest, GzipAndRawGiveTheSameTensor) {
  const std::string bytes = IdxImages(5, 3, 3);
  absl::StatusOr<at::Tensor> raw = ReadIdxFile(Write("raw", bytes));
  // A misleading name: compression is recognised by content.
  absl::StatusOr<at::Tensor> gz = ReadIdxFile(Write("gz", Gzip(bytes)));
  ASSERT_TRUE(raw.ok()) << raw.status();
  ASSERT_TRUE(gz.ok()) << gz.status();
  EXPECT_TRUE(at::equal(*raw, *gz));
}

TEST_F(IdxTest, ReadsConcatenatedGzipMembers) {
  const std::string bytes = IdxImages(4, 5, 5);
  const std::string half = bytes.substr(0, 37);
  absl::StatusOr<at::Tensor> t = ReadIdxFile(
      Write("multi.gz", Gzip(half) + Gzip(bytes.substr(half.size()))));
  ASSERT_TRUE(t.ok()) << t.status();
  absl::StatusOr<at::Tensor> raw = ReadIdxFile(Write("raw", bytes));
  ASSERT_TRUE(raw.ok());
  EXPECT_TRUE(at::equal(*t, *raw));
}

TEST_F(IdxTest, ConvertsMultiByteTypesFromBigEndian) {
  // int16 {1, -2}, int32 {0x01020304}, float32 {1.5}, float64 {-0.25}.
  const std::string int16 =
      IdxFile(0x0B, {2}, std::string("\x00\x01\xff\xfe", 4));
  const std::string int32 =
      IdxFile(0x0C, {1}, std::string("\x01\x02\x03\x04", 4));
  const std::string f32 =
      IdxFile(0x0D, {1}, std::string("\x3f\xc0\x00\x00", 4));
  const std::string f64 =
      IdxFile(0x0E, {1}, std::string("\xbf\xd0\x00\x00\x00\x00\x00\x00", 8));
  const std::string i8 = IdxFile(0x09, {1, 1}, std::string("\xff", 1));

  absl::StatusOr<at::Tensor> a = ReadIdxFile(Write("i16", int16));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->scalar_type(), at::kShort);
  EXPECT_EQ(a->data_ptr<int16_t>()[0], 1);
  EXPECT_EQ(a->data_ptr<int16_t>()[1], -2);
  absl::StatusOr<at::Tensor> b = ReadIdxFile(Write("i32", int32));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->data_ptr<int32_t>()[0], 0x01020304);
  absl::StatusOr<at::Tensor> c = ReadIdxFile(Write("f32", f32));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->data_ptr<float>()[0], 1.5f);
  absl::StatusOr<at::Tensor> d = ReadIdxFile(Write("f64", f64));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->data_ptr<double>()[0], -0.25);
  absl::StatusOr<at::Tensor> e = ReadIdxFile(Write("i8", i8));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->scalar_type(), at::kChar);
  EXPECT_EQ(e->sizes(), at::IntArrayRef({1, 1}));
  EXPECT_EQ(e->data_ptr<int8_t>()[0], -1);
}

TEST_F(IdxTest, AcceptsZeroExamples) {
  absl::StatusOr<at::Tensor> t =
      ReadIdxFile(Write("empty", IdxFile(0x08, {0, 28, 28}, "")));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->sizes(), at::IntArrayRef({0, 28, 28}));
}

struct BrokenCase {
  const char* name;
  std::string bytes;
  const char* message;
};

TEST_F(IdxTest, RejectsBrokenFilesWithClearErrors) {
  const std::string good = IdxImages(4, 3, 3);
  const std::vector<BrokenCase> cases = {
      {"empty file", "", "truncated: the magic number needs 4 bytes, only 0"},
      {"short magic", std::string("\x00\x00", 2), "the magic number needs 4"},
      {"wrong magic", "PK\x03\x04" + good.substr(4),
       "not an IDX file: the magic number 0x504b0304"},
      {"unknown type", IdxFile(0x07, {1}, "x"),
       "unknown IDX element type 0x07"},
      {"rank 0", IdxFile(0x08, {}, ""), "declares 0 dimensions"},
      {"truncated header", good.substr(0, 10), "the header needs 12 bytes"},
      {"truncated data", good.substr(0, good.size() - 5),
       "the header declares [4, 3, 3] uint8 (36 elements) but only 31 bytes"},
      {"trailing bytes", good + "abc",
       "3 unexpected bytes follow the data of [4, 3, 3] uint8"},
      {"huge dimensions",
       IdxFile(0x08, {0xffffffff, 0xffffffff, 0xffffffff}, ""),
       "more than 2^62"},
      {"truncated gzip", Gzip(good).substr(0, 20),
       "the gzip data is truncated"},
      {"gzip without its trailer", Gzip(good).substr(0, Gzip(good).size() - 4),
       "the gzip data is truncated"},
      {"gzip with a bad checksum",
       [&] {
         std::string z = Gzip(good);
         z[z.size() - 6] ^= 0x55;  // In the CRC-32.
         return z;
       }(),
       "corrupt gzip data"},
      {"gzip with corrupt data",
       [&] {
         std::string z = Gzip(good);
         for (size_t i = 10; i < z.size() - 8; ++i) z[i] = '\xff';
         return z;
       }(),
       "corrupt gzip data"},
      {"gzip with trailing garbage", Gzip(good) + "garbage",
       "corrupt gzip data"},
      {"gzip of a truncated file", Gzip(good.substr(0, 30)),
       "the data of [4, 3, 3] uint8 needs 36 bytes, only 14 are left"},
      {"gzip claiming too much", Gzip(IdxFile(0x08, {60000, 28, 28}, "")),
       "more data than a gzip file of"},
  };
  for (const BrokenCase& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = Write("broken", c.bytes);
    absl::StatusOr<at::Tensor> t = ReadIdxFile(path);
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument)
        << t.status();
    EXPECT_THAT(t.status().message(),
                AllOf(HasSubstr(path), HasSubstr(c.message)));
  }
}

TEST_F(IdxTest, MissingFileIsNotFound) {
  const std::string path = absl::StrCat(dir_, "/nothing-here");
  absl::StatusOr<at::Tensor> t = ReadIdxFile(path);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(t.status().message(), HasSubstr(path));
  EXPECT_EQ(ReadIdxFile(dir_).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(IdxTest, ReadIdxDatasetMakesNchwImagesAndLongLabels) {
  absl::StatusOr<Dataset> d =
      ReadIdxDataset(Write("img", IdxImages(3, 4, 5)),
                     Write("lab", IdxLabels({9, 0, 4})), 10, "tiny");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->size(), 3);
  EXPECT_EQ(d->images().sizes(), at::IntArrayRef({3, 1, 4, 5}));
  EXPECT_EQ(d->images().scalar_type(), at::kByte);
  EXPECT_EQ(d->labels().scalar_type(), at::kLong);
  EXPECT_EQ(d->labels()[0].item<int64_t>(), 9);
  EXPECT_EQ(d->labels()[2].item<int64_t>(), 4);
  EXPECT_EQ(d->images()[1][0][0][1].item<uint8_t>(), 8);
  EXPECT_EQ(d->DebugString(), "tiny: 3 x [1, 4, 5] Byte, 10 classes");
}

TEST_F(IdxTest, ReadIdxDatasetRejectsInconsistentFiles) {
  const std::string images = Write("img", IdxImages(3, 2, 2));
  const std::string labels = Write("lab", IdxLabels({1, 2, 3}));
  {
    absl::StatusOr<Dataset> d =
        ReadIdxDataset(images, Write("lab2", IdxLabels({1, 2})), 10, "x");
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(d.status().message(),
                HasSubstr("holds 3 images, " + dir_ + "/lab2 holds 2 labels"));
  }
  {
    absl::StatusOr<Dataset> d =
        ReadIdxDataset(images, Write("lab3", IdxLabels({1, 12, 3})), 10, "x");
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(d.status().message(),
                HasSubstr("label 12 of example 1 is outside [0, 10)"));
  }
  {  // The two files swapped.
    absl::StatusOr<Dataset> d = ReadIdxDataset(labels, images, 10, "x");
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(d.status().message(),
                HasSubstr("magic number 0x00000803 (uint8, rank 3) is not that "
                          "of labels files, 0x00000801 (uint8, rank 1)"));
  }
  {  // Images of another element type.
    absl::StatusOr<Dataset> d = ReadIdxDataset(
        Write("f32", IdxFile(0x0D, {3, 1, 1}, std::string(12, '\0'))), labels,
        10, "x");
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(d.status().message(),
                HasSubstr("0x00000d03 (float32, rank 3)"));
  }
  EXPECT_EQ(ReadIdxDataset(images, labels, 0, "x").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(IdxTest, InputFileReportsOffsets) {
  absl::StatusOr<std::unique_ptr<internal::InputFile>> f =
      internal::InputFile::Open(Write("f", Gzip("hello world")));
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE((*f)->compressed());
  char buf[5];
  ASSERT_TRUE((*f)->ReadExactly(buf, 5, "greeting").ok());
  EXPECT_EQ(std::string(buf, 5), "hello");
  EXPECT_EQ((*f)->offset(), 5u);
  const absl::Status end = (*f)->ExpectEnd("the greeting");
  EXPECT_THAT(end.message(),
              HasSubstr("6 unexpected bytes follow the greeting (at byte 5 of "
                        "the uncompressed data)"));
}

// The MNIST directory layout, on files the test writes.
class MnistTest : public IdxTest {};

TEST_F(MnistTest, LoadsBothSplitsGzippedOrRaw) {
  Write("train-images-idx3-ubyte.gz", Gzip(IdxImages(6, 28, 28)));
  Write("train-labels-idx1-ubyte.gz", Gzip(IdxLabels({5, 0, 4, 1, 9, 2})));
  Write("t10k-images-idx3-ubyte", IdxImages(2, 28, 28));
  Write("t10k-labels-idx1-ubyte", IdxLabels({7, 2}));
  absl::StatusOr<Dataset> train = LoadMnist(dir_, Split::kTrain);
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ(train->size(), 6);
  EXPECT_EQ(train->num_classes(), 10);
  EXPECT_EQ(train->images().sizes(), at::IntArrayRef({6, 1, 28, 28}));
  absl::StatusOr<Dataset> test = LoadMnist(dir_ + "/", Split::kTest);
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ(test->size(), 2);
  EXPECT_EQ(test->labels()[0].item<int64_t>(), 7);
}

TEST_F(MnistTest, AcceptsTheDottedSpelling) {
  Write("t10k-images.idx3-ubyte", IdxImages(2, 28, 28));
  Write("t10k-labels.idx1-ubyte", IdxLabels({7, 2}));
  absl::StatusOr<Dataset> test = LoadMnist(dir_, Split::kTest);
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ(test->size(), 2);
}

TEST_F(MnistTest, MissingFilesSayWhereAndHowToGetThem) {
  Write("train-images-idx3-ubyte.gz", Gzip(IdxImages(1, 28, 28)));
  absl::StatusOr<Dataset> train = LoadMnist(dir_, Split::kTrain);
  EXPECT_EQ(train.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(train.status().message(),
              AllOf(HasSubstr(dir_ + "/train-labels-idx1-ubyte.gz"),
                    HasSubstr(dir_ + "/train-labels-idx1-ubyte,"),
                    HasSubstr("apt-get install dataset-fashion-mnist"),
                    HasSubstr("--data_dir")));
  absl::StatusOr<Dataset> nowhere =
      LoadMnist(dir_ + "/does-not-exist", Split::kTest);
  EXPECT_EQ(nowhere.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(nowhere.status().message(),
              HasSubstr("directory " + dir_ + "/does-not-exist is missing"));
}

TEST_F(MnistTest, ReportsABrokenFileByPath) {
  Write("train-images-idx3-ubyte.gz", Gzip(IdxImages(3, 28, 28)));
  Write("train-labels-idx1-ubyte.gz", Gzip(IdxLabels({1, 2, 10})));
  absl::StatusOr<Dataset> train = LoadMnist(dir_, Split::kTrain);
  EXPECT_EQ(train.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(train.status().message(),
              AllOf(HasSubstr(dir_ + "/train-labels-idx1-ubyte.gz"),
                    HasSubstr("label 10 of example 2")));
}

// The real Fashion-MNIST, when Debian's package is installed.
TEST(FashionMnistTest, DefaultDirectoryHoldsFashionMnist) {
  absl::StatusOr<Dataset> train = LoadMnist(kFashionMnistDir, Split::kTrain);
  if (absl::IsNotFound(train.status())) {
    GTEST_SKIP() << "Fashion-MNIST is not installed (Debian package "
                    "dataset-fashion-mnist): "
                 << train.status();
  }
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ(train->images().sizes(), at::IntArrayRef({60000, 1, 28, 28}));
  // The first labels and the class balance of the published files.
  const std::vector<int64_t> first = {9, 0, 0, 3, 0, 2, 7, 2, 5, 5};
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(train->labels()[i].item<int64_t>(), first[i]) << i;
  }
  std::vector<int> counts(10);
  const int64_t* label = train->labels().data_ptr<int64_t>();
  for (int64_t i = 0; i < train->size(); ++i) ++counts[label[i]];
  for (int c = 0; c < 10; ++c) EXPECT_EQ(counts[c], 6000) << "class " << c;
  int64_t first_image_sum = 0;
  const uint8_t* px = train->images().data_ptr<uint8_t>();
  for (int i = 0; i < 784; ++i) first_image_sum += px[i];
  EXPECT_EQ(first_image_sum, 76247);

  absl::StatusOr<Dataset> test = LoadMnist(kFashionMnistDir, Split::kTest);
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ(test->size(), 10000);
}

// A path naming a FIFO, /dev/zero or a directory is refused at once (a FIFO
// used to block at open, /dev/zero to be read until memory ran out).
TEST_F(IdxTest, RefusesWhatIsNotARegularFile) {
  const std::string fifo = Write("x", "") + ".fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string zero = fifo + ".zero";
  std::filesystem::create_symlink("/dev/zero", zero);
  const std::string dir = fifo + ".dir";
  std::filesystem::create_directory(dir);
  for (const auto& [path, what] :
       {std::pair<std::string, std::string>{fifo, "a FIFO"},
        {zero, "a character device"},
        {dir, "a directory"}}) {
    const absl::Status s = ReadIdxFile(path).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << path;
    EXPECT_THAT(s.message(), AllOf(HasSubstr(path), HasSubstr(what)));
  }
}

// The size on disk is checked before anything is read: a sparse file over
// the limit is refused unread.
TEST_F(IdxTest, RefusesAFileOverTheLimit) {
  const std::string path = Write("sparse", "");
  ASSERT_EQ(::truncate(path.c_str(), int64_t{3} << 30), 0);
  absl::StatusOr<std::unique_ptr<internal::InputFile>> file =
      internal::InputFile::Open(path, int64_t{1} << 30);
  EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(file.status().message(),
              AllOf(HasSubstr(path), HasSubstr("3221225472 bytes"),
                    HasSubstr("limit of 1073741824 bytes for a data file")));
}

}  // namespace
}  // namespace dtrain::data
