// The safetensors codec: a file written here read back, the exact bytes of a
// small file as the format lays them out, every kind of malformed header
// refused with the entry named, and random damage to a real file that gives
// an error or a file, never a crash (run under --config=asan to see reads).

#include "models/state_dict/safetensors.h"

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/state_dict/hostile_weights.h"

namespace dtrain::models::state_dict {
namespace {

using ::testing::HasSubstr;

std::string Le32(float f) {
  std::string s(4, '\0');
  std::memcpy(s.data(), &f, 4);  // Debian's platforms are little-endian.
  return s;
}

SafetensorsFile Sample() {
  SafetensorsFile f;
  f.metadata["format"] = "pt";
  f.tensors.push_back({"fc.weight",
                       Dtype::kF32,
                       {2, 2},
                       Le32(1) + Le32(2) + Le32(3) + Le32(4)});
  f.tensors.push_back({"fc.bias", Dtype::kF32, {2}, Le32(-1) + Le32(0.5)});
  f.tensors.push_back(
      {"bn.num_batches_tracked", Dtype::kI64, {}, std::string(8, '\7')});
  f.tensors.push_back({"empty", Dtype::kBF16, {0, 3}, ""});
  return f;
}

// A header as Python's safetensors would write it, with its size in front.
std::string WithHeader(const std::string& json, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = json.size();
  std::memcpy(out.data(), &n, 8);
  return out + json + data;
}

TEST(SafetensorsTest, RoundTripsNamesDtypesShapesBytesAndMetadata) {
  absl::StatusOr<std::string> bytes = EncodeSafetensors(Sample());
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ((bytes->size() - 8 - (8 * 4 + 8 + 8)) % 8, 0u);  // padded header
  absl::StatusOr<SafetensorsFile> back = DecodeSafetensors(*bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  const SafetensorsFile sample = Sample();
  EXPECT_EQ(back->metadata, sample.metadata);
  ASSERT_EQ(back->tensors.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    const TensorEntry& want = sample.tensors[i];
    const TensorEntry& got = back->tensors[i];  // data order, as written
    EXPECT_EQ(got.name, want.name);
    EXPECT_EQ(got.dtype, want.dtype);
    EXPECT_EQ(got.shape, want.shape);
    EXPECT_EQ(got.data, want.data);
  }
}

TEST(SafetensorsTest, WritesTheLayoutTheSpecDescribes) {
  SafetensorsFile f;
  f.tensors.push_back({"a", Dtype::kF32, {1}, Le32(2)});
  absl::StatusOr<std::string> bytes = EncodeSafetensors(f);
  ASSERT_TRUE(bytes.ok());
  const std::string json =
      R"({"a":{"data_offsets":[0,4],"dtype":"F32","shape":[1]}})";
  const std::string padded = json + std::string((8 - json.size() % 8) % 8, ' ');
  EXPECT_EQ(*bytes, WithHeader(padded, Le32(2)));
}

TEST(SafetensorsTest, ReadsWhatAnotherWriterLaysOutDifferently) {
  // Keys in another order, no padding, data order unlike key order.
  const std::string json =
      R"({"b":{"dtype":"I8","shape":[2],"data_offsets":[0,2]},)"
      R"("__metadata__":{"k":"v"},)"
      R"("a":{"dtype":"F16","shape":[1,1],"data_offsets":[2,4]}})";
  absl::StatusOr<SafetensorsFile> f =
      DecodeSafetensors(WithHeader(json, std::string("\x01\x02\x00\x3c", 4)));
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(f->tensors.size(), 2u);
  EXPECT_EQ(f->tensors[0].name, "b");
  EXPECT_EQ(f->tensors[0].data, "\x01\x02");
  EXPECT_EQ(f->tensors[1].name, "a");
  EXPECT_EQ(f->tensors[1].dtype, Dtype::kF16);
  EXPECT_EQ(f->metadata.at("k"), "v");
}

TEST(SafetensorsTest, RefusesMalformedFilesNamingWhat) {
  const std::string ok_entry = R"("dtype":"F32","shape":[1])";
  struct Case {
    std::string bytes;
    std::string want;
  };
  std::string huge(8, '\xff');
  const Case cases[] = {
      {"abc", "too short"},
      {huge + "{}", "the header claims"},
      {WithHeader("[1]", ""), "start with '{'"},
      {WithHeader("{\"a\":", ""), "not a JSON object"},
      {WithHeader(R"({"a":{"dtype":"F32"}})", ""), "tensor 'a' needs"},
      {WithHeader(R"({"a":{"dtype":"Q7","shape":[1],"data_offsets":[0,4]}})",
                  Le32(1)),
       "unknown dtype 'Q7'"},
      {WithHeader(R"({"a":{)" + ok_entry + R"(,"data_offsets":[0,8]}})",
                  Le32(1)),
       "outside the 4 bytes"},
      {WithHeader(R"({"a":{)" + ok_entry + R"(,"data_offsets":[4,0]}})",
                  Le32(1)),
       "outside"},
      {WithHeader(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})",
                  Le32(1)),
       "needs 8 bytes, data_offsets give 4"},
      {WithHeader(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})",
                  Le32(1)),
       "negative dimension"},
      {WithHeader(R"({"a":{"dtype":"F64","shape":[4294967296,4294967296],)"
                  R"("data_offsets":[0,8]}})",
                  std::string(8, '\0')),
       "overflows"},
      {WithHeader(R"({"a":{)" + ok_entry + R"(,"data_offsets":[0,4]},)" +
                      R"("b":{)" + ok_entry + R"(,"data_offsets":[2,6]}})",
                  Le32(1) + Le32(2)),
       "overlaps"},
      {WithHeader(R"({"a":{)" + ok_entry + R"(,"data_offsets":[4,8]}})",
                  Le32(1) + Le32(2)),
       "a hole before it"},
      {WithHeader(R"({"a":{)" + ok_entry + R"(,"data_offsets":[0,4]}})",
                  Le32(1) + Le32(2)),
       "4 bytes that no tensor names"},
      {WithHeader(R"({"__metadata__":{"k":1}})", ""), "not a string"},
      {WithHeader(R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})",
                  Le32(1)),
       "not an integer"},
      {WithHeader(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})",
                  Le32(1)),
       "not two integers >= 0"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<SafetensorsFile> f = DecodeSafetensors(c.bytes);
    ASSERT_FALSE(f.ok()) << c.want;
    EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(f.status().message()), HasSubstr(c.want));
  }
}

TEST(SafetensorsTest, RefusesToWriteWhatCannotBeRead) {
  SafetensorsFile f = Sample();
  f.tensors[1].data += "x";
  EXPECT_THAT(std::string(EncodeSafetensors(f).status().message()),
              HasSubstr("'fc.bias' has 9 bytes of data, its shape needs 8"));
  f = Sample();
  f.tensors[1].name = "fc.weight";
  EXPECT_THAT(std::string(EncodeSafetensors(f).status().message()),
              HasSubstr("repeated"));
  f.tensors[1].name = "__metadata__";
  EXPECT_FALSE(EncodeSafetensors(f).ok());
}

TEST(SafetensorsTest, RandomDamageGivesAnErrorOrAFileNeverACrash) {
  const std::string good = *EncodeSafetensors(Sample());
  std::mt19937 rng(15);
  int refused = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string bad = good;
    switch (i % 3) {
      case 0:  // flip bytes
        for (int k = 0; k < 1 + i % 4; ++k)
          bad[rng() % bad.size()] ^= static_cast<char>(1 + rng() % 255);
        break;
      case 1:  // truncate
        bad.resize(rng() % bad.size());
        break;
      default:  // append
        bad += std::string(1 + rng() % 16, static_cast<char>(rng()));
        break;
    }
    absl::StatusOr<SafetensorsFile> f = DecodeSafetensors(bad);
    if (!f.ok()) {
      ++refused;
      EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
    }
  }
  // Every truncation and append is refused; most flips too.
  EXPECT_GT(refused, 20000 * 2 / 3);
}

TEST(SafetensorsTest, HostileHeadersAreRefusedOrWalkedWithoutATree) {
  // 20 MB of empty objects took 780 MB as a JSON document tree.
  std::string objects = "{}";
  while (objects.size() < 20'000'000) objects += ",{}";
  const std::string ok_entry =
      R"("dtype":"F32","shape":[1],"data_offsets":[0,4])";
  const std::string huge_list = WithHeader("{\"a\":[" + objects + "]}", "");
  absl::StatusOr<SafetensorsFile> f = DecodeSafetensors(huge_list);
  EXPECT_THAT(std::string(f.status().message()),
              HasSubstr("not a JSON object of tensors"));
  // An unknown field's value is walked, not kept.
  const std::string unknown_field = WithHeader(
      R"({"a":{)" + ok_entry + R"(,"x":[)" + objects + "]}}", Le32(7));
  f = DecodeSafetensors(unknown_field);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->tensors[0].data, Le32(7));
  const std::string twice = WithHeader(
      R"({"a":{)" + ok_entry + R"(},"a":{)" + ok_entry + "}}", Le32(7));
  EXPECT_THAT(std::string(DecodeSafetensors(twice).status().message()),
              HasSubstr("'a' is named twice"));
  const std::string nested = WithHeader(
      R"({"a":{"dtype":"F32","shape":[[1]],"data_offsets":[0,4]}})", Le32(7));
  EXPECT_FALSE(DecodeSafetensors(nested).ok());
  if (!CanLimitAddressSpace()) {
    GTEST_SKIP() << "RLIMIT_AS cannot bound AddressSanitizer's shadow memory";
  }
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto bounded = [&] {
    LimitAddressSpace(uint64_t{64} << 20);
    const bool refused = !DecodeSafetensors(huge_list).ok();
    std::exit(refused && DecodeSafetensors(unknown_field).ok() ? 0 : 1);
  };
  EXPECT_EXIT(bounded(), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace dtrain::models::state_dict
