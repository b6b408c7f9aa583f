#include "base/byte_codec.h"

#include <cstdint>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::base {
namespace {

using ::testing::HasSubstr;

TEST(LittleEndianTest, PutsLeastSignificantByteFirst) {
  char out[8] = {};
  PutLittleEndian(0x0102030405060708u, 8, out);
  EXPECT_EQ(std::string(out, 8), "\x08\x07\x06\x05\x04\x03\x02\x01");
  EXPECT_EQ(GetLittleEndian(out, 8), 0x0102030405060708u);
  EXPECT_EQ(GetLittleEndian(out, 2), 0x0708u);
  PutLittleEndian(0xFFEEu, 2, out);
  EXPECT_EQ(static_cast<unsigned char>(out[0]), 0xEE);
  EXPECT_EQ(static_cast<unsigned char>(out[1]), 0xFF);
}

TEST(ByteCodecTest, RoundTripsEveryField) {
  std::string bytes;
  ByteWriter w(&bytes);
  w.U8(7).Bool(true).U16(0xBEEF).U32(0xDEADBEEF).U64(~uint64_t{0} - 1);
  w.I64(-42).F64(-0.125);
  ASSERT_TRUE(w.String("name", "a name").ok());
  ASSERT_TRUE(w.Count(3, "items").ok());
  w.Raw("xyz");
  EXPECT_EQ(bytes.size(), 1u + 1 + 2 + 4 + 8 + 8 + 8 + 4 + 4 + 4 + 3);

  ByteReader r(bytes);
  uint8_t u8 = 0;
  bool b = false;
  uint16_t u16 = 0;
  uint32_t u32 = 0;
  uint64_t u64 = 0;
  int64_t i64 = 0;
  double f64 = 0;
  std::string name;
  size_t count = 0;
  absl::string_view raw;
  ASSERT_TRUE(r.U8("u8", &u8).ok());
  ASSERT_TRUE(r.Bool("b", &b).ok());
  ASSERT_TRUE(r.U16("u16", &u16).ok());
  ASSERT_TRUE(r.U32("u32", &u32).ok());
  ASSERT_TRUE(r.U64("u64", &u64).ok());
  ASSERT_TRUE(r.I64("i64", &i64).ok());
  ASSERT_TRUE(r.F64("f64", &f64).ok());
  ASSERT_TRUE(r.String("name", &name).ok());
  ASSERT_TRUE(r.Count("items", 1, &count).ok());
  ASSERT_TRUE(r.Raw(3, "raw", &raw).ok());
  EXPECT_TRUE(r.ExpectEnd("the test").ok());
  EXPECT_EQ(u8, 7);
  EXPECT_TRUE(b);
  EXPECT_EQ(u16, 0xBEEF);
  EXPECT_EQ(u32, 0xDEADBEEFu);
  EXPECT_EQ(u64, ~uint64_t{0} - 1);
  EXPECT_EQ(i64, -42);
  EXPECT_EQ(f64, -0.125);
  EXPECT_EQ(name, "name");
  EXPECT_EQ(count, 3u);
  EXPECT_EQ(raw, "xyz");
}

TEST(ByteCodecTest, PatchesALengthWrittenLater) {
  std::string bytes = "TAG";
  ByteWriter w(&bytes);
  const size_t at = w.position();
  w.U64(0).Raw("body");
  w.PatchU64(at, bytes.size() - at - 8);
  EXPECT_EQ(GetLittleEndian(bytes.data() + at, 8), 4u);
}

TEST(ByteReaderTest, ShortInputNamesFieldAndOffsetAndConsumesNothing) {
  const std::string bytes("\x01\x02\x03", 3);
  ByteReader r(bytes, /*base=*/100, "malformed thing: ");
  uint8_t first = 0;
  ASSERT_TRUE(r.U8("first", &first).ok());
  uint32_t value = 0;
  const absl::Status s = r.U32("the count", &value);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(s.message(),
            "malformed thing: the count needs 4 bytes at offset 101, 2 left");
  EXPECT_EQ(r.remaining(), 2u);
  EXPECT_EQ(r.offset(), 101u);
}

TEST(ByteReaderTest, RejectsBoolsOtherThanZeroOrOne) {
  ByteReader r(absl::string_view("\x02", 1));
  bool b = false;
  const absl::Status s = r.Bool("flag", &b);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(s.message(), "flag at offset 0 is 2, not 0 or 1");
}

TEST(ByteReaderTest, RejectsCountsTheRestCannotHold) {
  std::string bytes;
  ByteWriter(&bytes).U32(1000000).Raw("abcdefgh");
  ByteReader r(bytes);
  size_t count = 0;
  const absl::Status s = r.Count("entries", 2, &count);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("entries at offset 0 is 1000000, but the 8 bytes left "
                        "hold at most 4"));
  EXPECT_EQ(r.remaining(), bytes.size());
}

TEST(ByteReaderTest, RejectsStringLongerThanTheRest) {
  std::string bytes;
  ByteWriter(&bytes).U32(10).Raw("abc");
  ByteReader r(bytes);
  std::string s;
  EXPECT_THAT(std::string(r.String("key", &s).message()),
              HasSubstr("key needs 10 bytes at offset 4, 3 left"));
  EXPECT_EQ(r.remaining(), bytes.size());
}

TEST(ByteReaderTest, ExpectEndReportsTrailingBytes) {
  ByteReader r("ab");
  EXPECT_EQ(r.ExpectEnd("the frame").message(),
            "2 unexpected bytes at offset 0, the end of the frame");
}

TEST(ByteWriterTest, RefusesCountsOverUint32) {
  std::string bytes;
  ByteWriter w(&bytes, "cannot encode: ");
  const absl::Status s =
      w.Count(size_t{std::numeric_limits<uint32_t>::max()} + 1, "groups");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "cannot encode: 4294967296 groups (at most 4294967295)");
  EXPECT_TRUE(bytes.empty());
}

}  // namespace
}  // namespace dtrain::base
