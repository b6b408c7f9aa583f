// Damaged and foreign bytes, hand-picked and randomized: each is rejected
// (or, for damage inside tensor data, decoded) without a crash, and a
// rejection changes neither the model nor the optimizer. Run under
// --config=asan too.
#include <torch/optim/sgd.h>
#include <torch/serialize/archive.h>
#include <torch/types.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/checkpoint/checkpoint.h"
#include "trainer/checkpoint/checkpoint_testing.h"

namespace dtrain::trainer {
namespace {

using ::dtrain::trainer::testing::ExpectDecodeRejected;
using ::dtrain::trainer::testing::ExpectUnchanged;
using ::dtrain::trainer::testing::MakeHeader;
using ::dtrain::trainer::testing::OptimizerSnapshot;
using ::dtrain::trainer::testing::Snapshot;
using ::dtrain::trainer::testing::StatusIs;
using ::dtrain::trainer::testing::Tiny;
using ::dtrain::trainer::testing::TinyCheckpoint;
using ::dtrain::trainer::testing::TinyStep;
using ::testing::Eq;
using ::testing::HasSubstr;
using ::testing::SizeIs;

// A LibTorch archive holding one tensor: what version 1 checkpoints were.
std::string TorchArchive() {
  torch::serialize::OutputArchive archive;
  archive.write("weight", torch::ones({3}));
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

// A Tiny model of seed 2 and an SGD with momentum after one step: every
// parameter has a momentum buffer. The damage tests decode into it.
struct SteppedTiny {
  SteppedTiny()
      : model(Seeded(2)),
        sgd(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9)) {
    TinyStep(model, sgd, 3);
  }
  static Tiny Seeded(int64_t seed) {
    torch::manual_seed(seed);
    return Tiny();
  }
  Tiny model;
  torch::optim::SGD sgd;
};

struct Damaged {
  std::string name;
  std::string bytes;
  absl::StatusCode code;
  std::string message;
};

std::vector<Damaged> DamagedVersions(const std::string& good) {
  const size_t payload = good.size() - kCheckpointHeaderSize;
  std::vector<Damaged> out;
  out.push_back({"empty", "", absl::StatusCode::kDataLoss,
                 "truncated: 0 bytes, shorter than the 24-byte header"});
  out.push_back({"inside the magic", good.substr(0, 5),
                 absl::StatusCode::kDataLoss, "truncated: 5 bytes"});
  out.push_back({"inside the header", good.substr(0, 20),
                 absl::StatusCode::kDataLoss, "truncated: 20 bytes"});
  out.push_back({"header only", good.substr(0, kCheckpointHeaderSize),
                 absl::StatusCode::kDataLoss,
                 absl::StrCat("truncated: header says ", payload,
                              " payload bytes, found 0")});
  out.push_back({"inside the payload", good.substr(0, good.size() / 2),
                 absl::StatusCode::kDataLoss,
                 absl::StrCat("truncated: header says ", payload,
                              " payload bytes, found ",
                              good.size() / 2 - kCheckpointHeaderSize)});
  out.push_back({"last byte missing", good.substr(0, good.size() - 1),
                 absl::StatusCode::kDataLoss,
                 absl::StrCat("truncated: header says ", payload,
                              " payload bytes, found ", payload - 1)});
  out.push_back({"a byte too many", good + "x", absl::StatusCode::kDataLoss,
                 "1 unexpected bytes at the end"});
  std::string flipped = good;
  flipped[kCheckpointHeaderSize + payload / 3] ^= 0x10;
  out.push_back({"flipped payload byte", flipped, absl::StatusCode::kDataLoss,
                 "checksum mismatch"});
  std::string bad_crc = good;
  bad_crc[21] ^= 0x01;
  out.push_back({"flipped CRC byte", bad_crc, absl::StatusCode::kDataLoss,
                 "checksum mismatch"});
  std::string version1 = good;
  version1[8] = 1;
  out.push_back({"version 1", version1, absl::StatusCode::kInvalidArgument,
                 "checkpoint format version 1 is no longer read; this build "
                 "reads versions 2 and 3"});
  std::string version4 = good;
  version4[8] = 4;
  out.push_back({"version 4", version4, absl::StatusCode::kInvalidArgument,
                 "unsupported checkpoint format version 4 (this build reads "
                 "versions 2 and 3)"});
  std::string version0 = good;
  version0[8] = 0;
  out.push_back({"version 0", version0, absl::StatusCode::kInvalidArgument,
                 "unsupported checkpoint format version 0"});
  // A version 3 payload behind a version 2 header: its HOOK section is bytes
  // that version 2 does not have (the CRC covers the payload only).
  std::string version2 = good;
  version2[8] = 2;
  out.push_back({"version 3 payload as version 2", version2,
                 absl::StatusCode::kDataLoss, "the end of the payload"});

  std::mt19937 random(7);
  std::string noise(1000, '\0');
  for (char& c : noise) c = static_cast<char>(random());
  noise[0] = 'x';
  out.push_back({"random bytes", noise, absl::StatusCode::kInvalidArgument,
                 "not a dtrain checkpoint (magic \"x"});
  out.push_back({"plain torch archive", TorchArchive(),
                 absl::StatusCode::kInvalidArgument,
                 "not a dtrain checkpoint (magic \"PK\\x03\\x04"});
  out.push_back({"text", "DTRAINCX and more",
                 absl::StatusCode::kInvalidArgument,
                 "instead of \"DTRAINCK\""});
  return out;
}

TEST(CheckpointTest, DamagedOrForeignBytesAreRejectedWithoutChangingAnything) {
  const std::string good = TinyCheckpoint(1);
  SteppedTiny target;
  for (const Damaged& damaged : DamagedVersions(good)) {
    SCOPED_TRACE(damaged.name);
    const absl::Status valid = ValidateCheckpointBytes(damaged.bytes);
    EXPECT_THAT(valid, StatusIs(damaged.code, HasSubstr(damaged.message)));
    ExpectDecodeRejected(damaged.bytes, *target.model, target.sgd, Eq(valid));
    EXPECT_THAT(target.sgd.state(), SizeIs(target.model->parameters().size()));
  }
}

// The mutations of the randomized tests. Each draws from `rng` in a fixed
// order, so that a seed gives the same mutations on every run.
using Mutation = void (*)(std::mt19937_64& rng, std::string& bytes);

// A few flipped bits.
void FlipBits(std::mt19937_64& rng, std::string& bytes) {
  for (int k = 0; k < 1 + static_cast<int>(rng() % 4); ++k)
    bytes[rng() % bytes.size()] ^= static_cast<char>(1 << (rng() % 8));
}

// Cut short.
void CutShort(std::mt19937_64& rng, std::string& bytes) {
  bytes.resize(rng() % bytes.size());
}

// A run of up to 64 random bytes.
void OverwriteRun(std::mt19937_64& rng, std::string& bytes) {
  for (size_t at = rng() % bytes.size(), k = 0; k < 64 && at + k < bytes.size();
       ++k)
    bytes[at + k] = static_cast<char>(rng() & 0xff);
}

// Random bytes at random places among the last 200 (in a payload: the hook's
// state and the end of the training state).
void OverwriteEnd(std::mt19937_64& rng, std::string& bytes) {
  for (size_t k = 1; k <= std::min<size_t>(200, bytes.size()); ++k)
    if (rng() % 3 == 0)
      bytes[bytes.size() - k] = static_cast<char>(rng() & 0xff);
}

// A lying length, count or size: 4 or 8 extreme bytes.
void OverwriteWithExtremeValue(std::mt19937_64& rng, std::string& bytes) {
  const size_t width = rng() % 2 == 0 ? 4 : 8;
  const size_t at = rng() % (bytes.size() - width);
  static constexpr uint64_t kValues[] = {
      0xffffffffffffffffu, 0x7fffffffffffffffu, 0x8000000000000000u,
      0x00000000ffffffffu, 0x000000007fffffffu, 0x0000000000010000u};
  const uint64_t value = rng() % 4 == 0 ? rng() : kValues[rng() % 6];
  for (size_t k = 0; k < width; ++k)
    bytes[at + k] = static_cast<char>(value >> (8 * k));
}

// A few random bytes in the header.
void OverwriteHeaderBytes(std::mt19937_64& rng, std::string& bytes) {
  for (int k = 0; k < 1 + static_cast<int>(rng() % 4); ++k)
    bytes[rng() % kCheckpointHeaderSize] = static_cast<char>(rng() & 0xff);
}

// 1 to 8 bytes inserted or deleted: everything after shifts.
void InsertOrDelete(std::mt19937_64& rng, std::string& bytes) {
  const size_t at = rng() % bytes.size();
  const size_t n = 1 + rng() % 8;
  if (rng() % 2 == 0) {
    bytes.insert(at, std::string(n, static_cast<char>(rng() & 0xff)));
  } else {
    bytes.erase(at, n);
  }
}

// 1 to 100 bytes appended.
void Append(std::mt19937_64& rng, std::string& bytes) {
  bytes.append(1 + rng() % 100, static_cast<char>(rng() & 0xff));
}

// Randomized: payload mutations behind a recomputed, valid header reach the
// payload reader. Each must be decoded or rejected, never crash (run it
// under --config=asan too), and a rejection must leave the model and the
// optimizer alone.
TEST(CheckpointTest, RandomPayloadDamageBehindAValidHeaderIsHandled) {
  const std::string good = TinyCheckpoint(1);
  const std::string payload = good.substr(kCheckpointHeaderSize);
  SteppedTiny target;
  constexpr Mutation kDamage[] = {FlipBits,
                                  CutShort,
                                  OverwriteRun,
                                  OverwriteEnd,
                                  OverwriteWithExtremeValue,
                                  InsertOrDelete};
  std::mt19937_64 rng(7);
  int decoded_ok = 0;
  int rejected = 0;
  int data_loss = 0;
  constexpr int kMutations = 2000;
  for (int i = 0; i < kMutations; ++i) {
    std::string damaged = payload;
    kDamage[i % std::size(kDamage)](rng, damaged);
    const std::vector<torch::Tensor> before = Snapshot(*target.model);
    const OptimizerSnapshot momentum = Snapshot(target.sgd);
    const std::string bytes = MakeHeader(3, damaged) + damaged;
    ASSERT_TRUE(ValidateCheckpointHeader(bytes, bytes.size()).ok());
    // What ValidateCheckpointBytes refuses (a resume then skips the file),
    // DecodeCheckpoint refuses alike.
    const absl::Status valid = ValidateCheckpointBytes(bytes);
    absl::StatusOr<TrainingState> state =
        DecodeCheckpoint(bytes, *target.model, target.sgd);
    if (!valid.ok()) {
      EXPECT_EQ(state.status(), valid);
    }
    if (state.ok()) {
      ++decoded_ok;
      // The next mutation starts from a model with every momentum buffer.
      TinyStep(target.model, target.sgd, 3);
    } else {
      ++rejected;
      if (state.status().code() == absl::StatusCode::kDataLoss) ++data_loss;
      ExpectUnchanged(before, *target.model);
      ExpectUnchanged(momentum, target.sgd);
      EXPECT_THAT(target.sgd.state(),
                  SizeIs(target.model->parameters().size()));
    }
  }
  // Most damage to the tensors' data decodes; damage to anything else
  // cannot.
  EXPECT_GT(rejected, kMutations / 2);
  std::printf(
      "checkpoint payloads: %d mutations, %d decoded, %d rejected (%d of "
      "them kDataLoss)\n",
      kMutations, decoded_ok, rejected, data_loss);
}

// Randomized: damage anywhere in the file, header included, without fixing
// the header, is caught by the header checks alone (or, where it makes the
// version 2, by the payload reader: the CRC does not cover the version).
TEST(CheckpointTest, RandomDamageAnywhereIsRejectedByTheHeaderChecks) {
  const std::string good = TinyCheckpoint(1);
  SteppedTiny target;
  const std::vector<torch::Tensor> before = Snapshot(*target.model);
  const OptimizerSnapshot momentum = Snapshot(target.sgd);
  constexpr Mutation kDamage[] = {FlipBits,       CutShort,
                                  OverwriteRun,   OverwriteHeaderBytes,
                                  InsertOrDelete, Append};
  std::mt19937_64 rng(11);
  int data_loss = 0;
  int invalid_argument = 0;
  constexpr int kMutations = 2000;
  for (int i = 0; i < kMutations; ++i) {
    std::string damaged = good;
    // Redrawn in the rare case that the damage cancels out (a bit flipped
    // twice, random bytes equal to the old ones).
    while (damaged == good) {
      kDamage[i % std::size(kDamage)](rng, damaged);
    }
    const absl::Status valid = ValidateCheckpointBytes(damaged);
    ASSERT_FALSE(valid.ok()) << "mutation " << i;
    if (valid.code() == absl::StatusCode::kDataLoss) {
      ++data_loss;
    } else {
      EXPECT_EQ(valid.code(), absl::StatusCode::kInvalidArgument) << valid;
      ++invalid_argument;
    }
    EXPECT_EQ(DecodeCheckpoint(damaged, *target.model, target.sgd).status(),
              valid);
  }
  ExpectUnchanged(before, *target.model);
  ExpectUnchanged(momentum, target.sgd);
  EXPECT_THAT(target.sgd.state(), SizeIs(target.model->parameters().size()));
  std::printf(
      "checkpoint files: %d mutations, all rejected by the header checks: %d "
      "kDataLoss (truncated, length, checksum), %d kInvalidArgument (magic, "
      "version)\n",
      kMutations, data_loss, invalid_argument);
}

TEST(CheckpointTest, ValidHeaderWithForeignPayloadIsDataLoss) {
  const std::string payload = "not a dtrain payload";
  torch::manual_seed(1);
  Tiny model;
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  const std::string bytes = MakeHeader(3, payload) + payload;
  EXPECT_TRUE(ValidateCheckpointHeader(bytes, bytes.size()).ok());
  EXPECT_EQ(ValidateCheckpointBytes(bytes).code(), absl::StatusCode::kDataLoss);
  ExpectDecodeRejected(
      bytes, *model, sgd,
      StatusIs(absl::StatusCode::kDataLoss,
               HasSubstr("malformed checkpoint payload: expected section MODL "
                         "at offset 0, found \"not \"")));

  // A LibTorch archive (what version 1 held) behind a version 3 header.
  const std::string archive = TorchArchive();
  ExpectDecodeRejected(MakeHeader(3, archive) + archive, *model, sgd,
                       StatusIs(absl::StatusCode::kDataLoss,
                                HasSubstr("expected section MODL at offset 0, "
                                          "found \"PK\\x03\\x04\"")));

  // Behind a version 1 header: that version is no longer read at all.
  const std::string version1 = MakeHeader(1, archive) + archive;
  EXPECT_EQ(ValidateCheckpointBytes(version1).code(),
            absl::StatusCode::kInvalidArgument);
  ExpectDecodeRejected(
      version1, *model, sgd,
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("checkpoint format version 1 is no longer read")));
}

}  // namespace
}  // namespace dtrain::trainer
