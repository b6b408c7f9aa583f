// torch.save's format: files written here read back bit for bit, a file from
// Python's torch.save (testdata/, with views, shared storages and
// `_metadata`) reads as Python sees it, the archive is laid out as PyTorch
// lays it out, and hostile or damaged files (code in the pickle, storages too
// small, deep nesting, random damage) give errors, never a crash (run under
// --config=asan to see reads).

#include "models/state_dict/torch_save.h"

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/crc32.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/state_dict/hostile_weights.h"
#include "models/state_dict/torch_pickle.h"
#include "models/state_dict/zip_archive.h"

namespace dtrain::models::state_dict {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

template <typename T>
std::string Bytes(std::initializer_list<T> values) {
  std::string s(values.size() * sizeof(T), '\0');
  std::memcpy(s.data(), values.begin(), s.size());
  return s;
}

std::vector<TensorEntry> Sample() {
  return {
      {"conv.weight", Dtype::kF32, {2, 1, 1, 2}, Bytes<float>({1, 2, 3, 4})},
      {"conv.bias", Dtype::kF64, {2}, Bytes<double>({-1, 0.25})},
      {"bn.num_batches_tracked", Dtype::kI64, {}, Bytes<int64_t>({1LL << 40})},
      {"flags", Dtype::kBool, {3}, std::string("\1\0\1", 3)},
      {"empty", Dtype::kF16, {0, 3}, ""},
      {"big_shape", Dtype::kU8, {70000}, std::string(70000, 'x')},
  };
}

void ExpectSame(const std::vector<TensorEntry>& a,
                const std::vector<TensorEntry>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].name, b[i].name);
    EXPECT_EQ(a[i].dtype, b[i].dtype) << a[i].name;
    EXPECT_EQ(a[i].shape, b[i].shape) << a[i].name;
    EXPECT_EQ(a[i].data, b[i].data) << a[i].name;
  }
}

std::string ReadTestdata(const std::string& name) {
  std::ifstream in("models/state_dict/testdata/" + name, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// An archive around `pickle` and `storages`, as torch.save lays one out.
std::string Archive(
    const std::string& pickle,
    std::vector<std::pair<std::string, std::string>> storages = {}) {
  std::vector<std::pair<std::string, std::string>> entries = {
      {"archive/data.pkl", pickle}};
  for (auto& [key, data] : storages)
    entries.emplace_back("archive/data/" + key, data);
  entries.emplace_back("archive/version", "3\n");
  return *WriteZip(entries);
}

// A literal with its NUL bytes.
template <size_t N>
std::string Lit(const char (&s)[N]) {
  return std::string(s, N - 1);
}

std::string Message(const absl::Status& s) { return std::string(s.message()); }

TEST(TorchSaveTest, RoundTripKeepsNamesOrderDtypesShapesAndBytes) {
  absl::StatusOr<std::string> bytes = EncodeTorchSave(Sample());
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  absl::StatusOr<std::vector<TensorEntry>> back = DecodeTorchSave(*bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSame(*back, Sample());
  // Deterministic: the same state gives the same bytes.
  EXPECT_EQ(*EncodeTorchSave(Sample()), *bytes);
}

TEST(TorchSaveTest, ArchiveIsLaidOutAsPyTorchWritesIt) {
  const std::string bytes = *EncodeTorchSave(Sample());
  absl::StatusOr<std::vector<ZipEntry>> zip = ReadZip(bytes);
  ASSERT_TRUE(zip.ok()) << zip.status();
  std::vector<std::string> names;
  for (const ZipEntry& e : *zip) {
    names.push_back(e.name);
    // Data aligned to 64 bytes, so that readers may map tensors in place.
    EXPECT_EQ((e.data.data() - bytes.data()) % 64, 0) << e.name;
  }
  EXPECT_THAT(
      names,
      ElementsAre("archive/data.pkl", "archive/byteorder", "archive/data/0",
                  "archive/data/1", "archive/data/2", "archive/data/3",
                  "archive/data/4", "archive/data/5", "archive/version"));
  EXPECT_EQ((*zip)[1].data, "little");
  EXPECT_EQ((*zip)[8].data, "3\n");
  EXPECT_EQ((*zip)[2].data, Sample()[0].data);
}

// The state_dict of testdata/make_python_state_dict.py.
void ExpectPythonStateDict(const std::string& file) {
  const std::string bytes = ReadTestdata(file);
  ASSERT_FALSE(bytes.empty()) << file;
  absl::StatusOr<std::vector<TensorEntry>> sd = DecodeTorchSave(bytes);
  ASSERT_TRUE(sd.ok()) << sd.status();
  ASSERT_EQ(sd->size(), 5u);
  // base = arange(12).reshape(3, 4); fc.weight = base.t(), fc.bias = base[1].
  EXPECT_EQ((*sd)[0].name, "fc.weight");
  EXPECT_EQ((*sd)[0].shape, (std::vector<int64_t>{4, 3}));
  EXPECT_EQ((*sd)[0].data,
            Bytes<float>({0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  EXPECT_EQ((*sd)[1].name, "fc.bias");
  EXPECT_EQ((*sd)[1].data, Bytes<float>({4, 5, 6, 7}));
  EXPECT_EQ((*sd)[2].name, "bn.num_batches_tracked");
  EXPECT_EQ((*sd)[2].dtype, Dtype::kI64);
  EXPECT_TRUE((*sd)[2].shape.empty());
  EXPECT_EQ((*sd)[2].data, Bytes<int64_t>({7}));
  EXPECT_EQ((*sd)[3].dtype, Dtype::kBool);
  EXPECT_EQ((*sd)[3].data, std::string("\1\0\1", 3));
  EXPECT_EQ((*sd)[4].dtype, Dtype::kBF16);
  // bfloat16 1.5 and -2.0: the high halves of the float32 bits.
  EXPECT_EQ((*sd)[4].data, Bytes<uint16_t>({0x3FC0, 0xC000}));
}

TEST(TorchSaveTest, ReadsPythonsTorchSaveWithViewsAndMetadata) {
  ExpectPythonStateDict("python_state_dict.pt");
}

TEST(TorchSaveTest, ReadsTheLegacyFormatBeforePyTorch16) {
  ExpectPythonStateDict("python_legacy_state_dict.pt");
}

TEST(TorchSaveTest, PickleThatCallsAnythingElseIsRefusedByName) {
  // pickle.dumps of os.system("true"), protocol 2.
  const std::string evil = std::string("\x80\x02") + "cos\nsystem\nX" +
                           std::string("\x04\0\0\0", 4) + "true\x85R.";
  absl::StatusOr<std::vector<TensorEntry>> sd = DecodeTorchSave(Archive(evil));
  ASSERT_FALSE(sd.ok());
  EXPECT_EQ(sd.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(sd.status()), HasSubstr("calls os.system"));
}

TEST(TorchSaveTest, TensorsOutsideTheirStorageAreRefused) {
  PickledTensor t;
  t.storage_key = "0";
  t.storage_numel = 4;
  t.size = {2, 2};
  t.stride = {2, 1};
  t.offset = 1;  // Reaches element 4 of 4.
  absl::StatusOr<std::vector<TensorEntry>> sd = DecodeTorchSave(Archive(
      WriteStateDictPickle({{"w", t}}), {{"0", Bytes<float>({1, 2, 3, 4})}}));
  ASSERT_FALSE(sd.ok());
  EXPECT_THAT(Message(sd.status()), HasSubstr("reaches element 4"));

  t.offset = 0;  // In bounds, but the storage has fewer bytes than it says.
  sd = DecodeTorchSave(Archive(WriteStateDictPickle({{"w", t}}),
                               {{"0", Bytes<float>({1, 2, 3})}}));
  ASSERT_FALSE(sd.ok());
  EXPECT_THAT(Message(sd.status()), HasSubstr("w: storage data/0 has 12"));

  sd = DecodeTorchSave(Archive(WriteStateDictPickle({{"w", t}})));
  ASSERT_FALSE(sd.ok());
  EXPECT_THAT(Message(sd.status()), HasSubstr("not in the file"));

  t.size = {1000000, 1000000};  // Stride 0: a huge view of 4 elements.
  t.stride = {0, 0};
  sd = DecodeTorchSave(Archive(WriteStateDictPickle({{"w", t}}),
                               {{"0", Bytes<float>({1, 2, 3, 4})}}));
  ASSERT_FALSE(sd.ok());
  EXPECT_THAT(Message(sd.status()), HasSubstr("expanded tensor"));
}

TEST(TorchSaveTest, OtherPicklesAreNotStateDicts) {
  // {"epoch": 3}: a checkpoint dict, not a state_dict.
  const std::string dict =
      std::string("\x80\x02}X\x05\0\0\0", 8) + "epochK\x03s.";
  absl::StatusOr<std::vector<TensorEntry>> sd = DecodeTorchSave(Archive(dict));
  ASSERT_FALSE(sd.ok());
  EXPECT_THAT(Message(sd.status()),
              HasSubstr("maps 'epoch' to a value of type int"));
  // A list at the top.
  sd = DecodeTorchSave(Archive("\x80\x02]."));
  ASSERT_FALSE(sd.ok());
  EXPECT_THAT(Message(sd.status()), HasSubstr("holds a list"));
  // A pickle that is neither in a zip nor the legacy format's.
  sd = DecodeTorchSave(std::string("\x80\x02\x8a\x0a", 4) + "other...");
  ASSERT_FALSE(sd.ok());
  EXPECT_THAT(Message(sd.status()), HasSubstr("a bare pickle"));
  // A zip without data.pkl.
  sd = DecodeTorchSave(*WriteZip({{"a/other", "x"}}));
  ASSERT_FALSE(sd.ok());
  EXPECT_THAT(Message(sd.status()), HasSubstr("without <folder>/data.pkl"));
}

TEST(TorchSaveTest, HostilePickleStructuresAreErrors) {
  // Nesting a hundred thousand tuples deep.
  std::string deep = "\x80\x02)";
  for (int i = 0; i < 100000; ++i) deep += "\x85";
  deep += '.';
  absl::StatusOr<std::vector<TensorEntry>> sd = DecodeTorchSave(Archive(deep));
  ASSERT_FALSE(sd.ok());
  EXPECT_THAT(Message(sd.status()), HasSubstr("nesting deeper than"));
  // A list changed after it went into a tuple (how a cycle would start).
  sd =
      DecodeTorchSave(Archive(Lit("\x80\x02]q\x00h\x00\x85"
                                  "0Na.")));
  ASSERT_FALSE(sd.ok());
  EXPECT_THAT(Message(sd.status()), HasSubstr("changed after it was placed"));
  // Stack underflow, an unset memo entry, no STOP.
  for (const char* bad : {"\x80\x02R.", "\x80\x02h\x07.", "\x80\x02}"}) {
    sd = DecodeTorchSave(Archive(bad));
    EXPECT_FALSE(sd.ok()) << bad;
  }
}

TEST(TorchSaveTest, ZipFaultsAreNamed) {
  const std::string good = *EncodeTorchSave(Sample());
  // A flipped data byte fails the CRC of its entry.
  std::string damaged = good;
  damaged[(*ReadZip(good))[2].data.data() - good.data()] ^= 1;
  absl::StatusOr<std::vector<TensorEntry>> sd = DecodeTorchSave(damaged);
  ASSERT_FALSE(sd.ok());
  EXPECT_THAT(Message(sd.status()), HasSubstr("archive/data/0: CRC-32"));
  // Truncation loses the end record.
  sd = DecodeTorchSave(good.substr(0, good.size() - 10));
  ASSERT_FALSE(sd.ok());
  EXPECT_THAT(Message(sd.status()), HasSubstr("no end-of-central-directory"));
}

TEST(TorchSaveTest, Zip64ArchivesReadBack) {
  // 65535 entries or more need the ZIP64 end record.
  std::vector<std::pair<std::string, std::string>> entries;
  for (int i = 0; i < 70000; ++i)
    entries.emplace_back("e/" + std::to_string(i), std::to_string(i));
  absl::StatusOr<std::string> bytes = WriteZip(entries);
  ASSERT_TRUE(bytes.ok());
  absl::StatusOr<std::vector<ZipEntry>> zip = ReadZip(*bytes);
  ASSERT_TRUE(zip.ok()) << zip.status();
  ASSERT_EQ(zip->size(), 70000u);
  EXPECT_EQ((*zip)[69999].name, "e/69999");
  EXPECT_EQ((*zip)[69999].data, "69999");
}

TEST(TorchSaveTest, RandomDamageNeverCrashes) {
  const std::string good = *EncodeTorchSave(Sample());
  const std::string files[] = {good, ReadTestdata("python_state_dict.pt"),
                               ReadTestdata("python_legacy_state_dict.pt")};
  std::mt19937 rng(16);
  int decoded = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string bytes = files[trial % 3];
    const int edits = 1 + rng() % 4;
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % bytes.size();
      switch (rng() % 3) {
        case 0:
          bytes[at] = static_cast<char>(rng());
          break;
        case 1:
          bytes.resize(at);
          break;
        default:
          bytes.insert(at, 1, static_cast<char>(rng()));
          break;
      }
      if (bytes.empty()) bytes = "x";
    }
    decoded += DecodeTorchSave(bytes).ok();
  }
  // CRCs catch damage to the data; damage the CRC cannot see (the directory's
  // own fields, the padding) may still decode.
  EXPECT_LT(decoded, 3000);
}

TEST(TorchSaveTest, PickleDamageNeverCrashes) {
  // The CRC would stop most damage before the pickle machine sees it: damage
  // the pickle itself and wrap it in a valid archive.
  const std::string good = *EncodeTorchSave(Sample());
  const std::string pickle((*ReadZip(good))[0].data);
  std::mt19937 rng(17);
  for (int trial = 0; trial < 3000; ++trial) {
    std::string p = pickle;
    const int edits = 1 + rng() % 3;
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % p.size();
      if (rng() % 2) {
        p[at] = static_cast<char>(rng());
      } else {
        p.erase(at, 1 + rng() % 8);
      }
      if (p.empty()) p = ".";
    }
    (void)DecodeTorchSave(Archive(p, {{"0", Sample()[0].data}}));
  }
}

// Hostile files: memory stays a small multiple of the file however its
// names alias and whatever its pickle's opcodes.

TEST(TorchSaveTest, NamesSharingAStorageViewItOnce) {
  for (bool memoized : {false, true}) {
    const std::string bytes = SharedStorageArchive(3000, 1 << 20, memoized);
    absl::StatusOr<TorchSaveFile> file = ParseTorchSave(bytes);
    ASSERT_TRUE(file.ok()) << file.status();
    ASSERT_EQ(file->storages.size(), 1u);
    EXPECT_EQ(file->storages[0].size(), 1u << 20);
    // The storage is a view of the file's bytes, not a copy.
    EXPECT_GE(file->storages[0].data(), bytes.data());
    EXPECT_LE(file->storages[0].data() + file->storages[0].size(),
              bytes.data() + bytes.size());
    EXPECT_EQ(file->tensors.size(), memoized ? 1u : 3000u);
    for (const TorchSaveFile::Tensor& t : file->tensors) {
      EXPECT_EQ(t.storage, 0u);
      EXPECT_THAT(t.size, ElementsAre(1 << 18));
    }
    ASSERT_EQ(file->names.size(), 3000u);
    EXPECT_EQ(file->names[2999].first, "w2999");
    EXPECT_EQ(file->names[2999].second, memoized ? 0u : 2999u);
    // Copying each name's view out would take 3 GB: refused.
    absl::StatusOr<std::vector<TensorEntry>> copies = DecodeTorchSave(bytes);
    EXPECT_EQ(copies.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(copies.status().message(), HasSubstr("share storages"));
  }
}

TEST(TorchSaveTest, MegabytesOfOneByteOpcodesAreRefusedNamingTheLimit) {
  // Each makes an object or a memo or stack entry per byte or two; Python's
  // pickle would spend hundreds of bytes per input byte on them.
  for (const char* opcodes : {"]", "}", "]\x94", "K\x01", "(", "N2"}) {
    // 2 MB (the attack had 9.2 MB; the child below reads that) keeps the
    // test quick under ASan.
    const std::string bytes = RepeatedOpcodeArchive(opcodes, 2'000'000);
    absl::StatusOr<std::vector<TensorEntry>> sd = DecodeTorchSave(bytes);
    ASSERT_FALSE(sd.ok()) << opcodes;
    if (std::string(opcodes) == "(" || std::string(opcodes) == "N2") {
      // 8 and 16 bytes a byte, under the budget: the error is the pickle's.
      EXPECT_EQ(sd.status().code(), absl::StatusCode::kDataLoss) << opcodes;
      continue;
    }
    EXPECT_EQ(sd.status().code(), absl::StatusCode::kResourceExhausted)
        << opcodes << ": " << sd.status();
    EXPECT_THAT(
        sd.status().message(),
        HasSubstr(absl::StrCat(
            "past the limit of ", 16 * bytes.size() + (1 << 20),
            " bytes (16 per byte of the ", bytes.size(), "-byte input")));
  }
}

TEST(TorchSaveTest, ABigStorageKeyUsedByManyTensorsIsRefused) {
  // One 60 kB key, memoized, in 3000 rebuilt tensors: each would copy it.
  PickledTensor t;
  t.storage_key = std::string(60000, 'k');
  t.storage_numel = 1;
  t.size = {1};
  t.stride = {1};
  std::string pickle = WriteStateDictPickle({{"w", t}});
  // Rebuild the tensor from its memoized pieces 3000 times: the rebuild
  // call's arguments are the tuple before the last REDUCE.
  const size_t call = pickle.find("ctorch._utils\n_rebuild_tensor_v2\n");
  const size_t reduce = pickle.rfind("tR");
  ASSERT_NE(call, std::string::npos);
  std::string body = pickle.substr(0, reduce + 1);  // Through the args' t.
  body += "q\x02";                                  // Memo 2: the args.
  body.insert(call + 33, "q\x01");                  // Memo 1: the callable.
  body += "R";
  for (int i = 1; i < 3000; ++i)
    body += absl::StrCat("X", std::string("\x05\x00\x00\x00", 4),
                         absl::StrFormat("w%04d", i), "h\x01h\x02R");
  body += "u.";
  absl::StatusOr<std::vector<TensorEntry>> sd =
      DecodeTorchSave(Archive(body, {{t.storage_key, "1234"}}));
  EXPECT_EQ(sd.status().code(), absl::StatusCode::kResourceExhausted)
      << sd.status();
}

TEST(TorchSaveTest, ReadingHostileFilesStaysInABoundedAddressSpace) {
  if (!CanLimitAddressSpace()) {
    GTEST_SKIP() << "RLIMIT_AS cannot bound AddressSanitizer's shadow "
                    "memory; the budgets' errors are checked above";
  }
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // Before the budget, the lists took 1.9 GB; shared names 3 GB of copies.
  auto lists = [] {
    const std::string bytes = RepeatedOpcodeArchive("]", 9'200'000);
    LimitAddressSpace(uint64_t{400} << 20);
    std::exit(DecodeTorchSave(bytes).status().code() ==
                      absl::StatusCode::kResourceExhausted
                  ? 0
                  : 1);
  };
  EXPECT_EXIT(lists(), ::testing::ExitedWithCode(0), "");
  auto shared = [] {
    const std::string bytes = SharedStorageArchive(3000, 1 << 20, false);
    LimitAddressSpace(uint64_t{200} << 20);
    absl::StatusOr<TorchSaveFile> file = ParseTorchSave(bytes);
    std::exit(file.ok() && file->storages.size() == 1 ? 0 : 1);
  };
  EXPECT_EXIT(shared(), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace dtrain::models::state_dict
