// Checkpoints whose TrainingState fields lie, behind a valid header and
// checksum: each field out of its range (or inconsistent with another) is
// refused by ValidateCheckpointBytes and DecodeCheckpoint as damage, naming
// the field, its value and the bound; EncodeCheckpoint does not write it; a
// resume skips such a file for an older one.
#include <torch/optim/sgd.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/byte_codec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/checkpoint/checkpoint.h"
#include "trainer/checkpoint/checkpoint_dir.h"
#include "trainer/checkpoint/checkpoint_testing.h"

namespace dtrain::trainer {
namespace {

using ::dtrain::trainer::testing::ExpectDecodeRejected;
using ::dtrain::trainer::testing::MakeHeader;
using ::dtrain::trainer::testing::MakeTempDir;
using ::dtrain::trainer::testing::Payload;
using ::dtrain::trainer::testing::SomeState;
using ::dtrain::trainer::testing::StatusIs;
using ::dtrain::trainer::testing::Tiny;
using ::dtrain::trainer::testing::TinyCheckpoint;
using ::dtrain::trainer::testing::TinyStep;
using ::dtrain::trainer::testing::WriteRaw;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::SizeIs;

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

// The offset just past the `n`-th section of `payload`.
size_t SectionEnd(absl::string_view payload, int n) {
  size_t at = 0;
  for (int section = 0; section < n; ++section) {
    at += 4;
    at += 8 + base::GetLittleEndian(payload.data() + at, 8);
  }
  return at;
}

// `checkpoint` (a valid one of version 3) with its STAT section replaced by
// `state`, written field by field as docs/FORMATS.md says, behind a valid
// header.
std::string WithState(const std::string& checkpoint, const TrainingState& s) {
  const std::string payload = checkpoint.substr(kCheckpointHeaderSize);
  const size_t at = SectionEnd(payload, 2);  // MODL, OPTM
  const size_t hook_at = SectionEnd(payload, 3);
  const Payload state = Payload()
                            .I64(s.epoch)
                            .Str(s.sampler.Serialize())
                            .I64(s.global_step)
                            .F64(s.best_top1)
                            .Str(s.model_name)
                            .Str(s.optimizer_name)
                            .U64(s.seed)
                            .Str(s.config_json);
  const std::string out = payload.substr(0, at) +
                          Payload().Section("STAT", state).bytes() +
                          payload.substr(hook_at);
  return MakeHeader(3, out) + out;
}

struct Lie {
  std::string name;
  std::function<void(TrainingState&)> apply;
  std::string message;
};

// SomeState: epoch 3, sampler 512 of 60000 over 4 replicas (15000 each, with
// drop_last), global_step 12345.
std::vector<Lie> Lies() {
  auto epoch = [](int64_t e) {
    return [e](TrainingState& s) { s.epoch = s.sampler.epoch = e; };
  };
  return {
      {"global_step 2^63-1",
       [](TrainingState& s) { s.global_step = kInt64Max; },
       "global_step is 9223372036854775807, outside [0, 1099511627776]"},
      {"global_step -7", [](TrainingState& s) { s.global_step = -7; },
       "global_step is -7, outside [0, 1099511627776]"},
      {"epoch 2^63-1", epoch(kInt64Max),
       "epoch is 9223372036854775807, outside [0, 2147483648]"},
      {"epoch -1", epoch(-1), "epoch is -1, outside [0, 2147483648]"},
      {"sampler epoch differs", [](TrainingState& s) { s.sampler.epoch = 2; },
       "sampler epoch is 2, not the checkpoint's epoch 3"},
      {"best_top1 101", [](TrainingState& s) { s.best_top1 = 101; },
       "best_top1 is 101, outside [0, 100]"},
      {"best_top1 -1", [](TrainingState& s) { s.best_top1 = -1; },
       "best_top1 is -1, outside [0, 100]"},
      {"best_top1 NaN", [](TrainingState& s) { s.best_top1 = std::nan(""); },
       "best_top1 is nan, outside [0, 100]"},
      {"dataset_size -1", [](TrainingState& s) { s.sampler.dataset_size = -1; },
       "sampler dataset_size is -1, outside [0, 1099511627776]"},
      {"dataset_size 2^62",
       [](TrainingState& s) { s.sampler.dataset_size = int64_t{1} << 62; },
       "sampler dataset_size is 4611686018427387904, outside [0, "
       "1099511627776]"},
      {"num_replicas 0", [](TrainingState& s) { s.sampler.num_replicas = 0; },
       "sampler num_replicas is 0, outside [1, 1048576]"},
      {"num_replicas 2^40",
       [](TrainingState& s) { s.sampler.num_replicas = int64_t{1} << 40; },
       "sampler num_replicas is 1099511627776, outside [1, 1048576]"},
      {"start -1", [](TrainingState& s) { s.sampler.start = -1; },
       "sampler start is -1, outside [0, 60000]"},
      {"start past the dataset",
       [](TrainingState& s) { s.sampler.start = 60001; },
       "sampler start is 60001, outside [0, 60000]"},
      {"position -1", [](TrainingState& s) { s.sampler.position = -1; },
       "sampler position is -1, outside [0, 15000]"},
      {"position past the partition",
       [](TrainingState& s) { s.sampler.position = 15001; },
       "sampler position is 15001, outside [0, 15000]"},
      {"position past a partition that starts later",
       [](TrainingState& s) {
         s.sampler.start = 59000;
         s.sampler.position = 251;
       },
       "sampler position is 251, outside [0, 250]"},
      {"model_name of 2000 bytes",
       [](TrainingState& s) { s.model_name = std::string(2000, 'm'); },
       "model_name has 2000 bytes, more than 1024"},
      {"optimizer_name of 2000 bytes",
       [](TrainingState& s) { s.optimizer_name = std::string(2000, 'o'); },
       "optimizer_name has 2000 bytes, more than 1024"},
      {"optimizer_name of another optimizer",
       [](TrainingState& s) { s.optimizer_name = "adadelta"; },
       "optimizer_name \"adadelta\" but section OPTM holds sgd state"},
  };
}

TEST(CheckpointFieldsTest, TheUnchangedStateDecodes) {
  const std::string good = TinyCheckpoint(1);
  EXPECT_EQ(WithState(good, SomeState("tiny", "sgd")), good);
  EXPECT_TRUE(ValidateCheckpointBytes(good).ok());
}

TEST(CheckpointFieldsTest, EachFieldThatLiesIsDataLossNamingIt) {
  const std::string good = TinyCheckpoint(1);
  torch::manual_seed(2);
  Tiny model;
  torch::optim::SGD sgd(model->parameters(),
                        torch::optim::SGDOptions(0.1).momentum(0.9));
  TinyStep(model, sgd, 3);
  for (const Lie& lie : Lies()) {
    SCOPED_TRACE(lie.name);
    TrainingState state = SomeState("tiny", "sgd");
    lie.apply(state);
    const std::string bytes = WithState(good, state);
    const auto rejected =
        StatusIs(absl::StatusCode::kDataLoss,
                 AllOf(HasSubstr("malformed checkpoint payload: "),
                       HasSubstr(lie.message)));
    EXPECT_THAT(ValidateCheckpointBytes(bytes), rejected);
    ExpectDecodeRejected(bytes, *model, sgd, rejected);
  }
}

TEST(CheckpointFieldsTest, EncodeRefusesEachFieldThatLies) {
  torch::manual_seed(2);
  Tiny model;
  torch::optim::SGD sgd(model->parameters(),
                        torch::optim::SGDOptions(0.1).momentum(0.9));
  for (const Lie& lie : Lies()) {
    SCOPED_TRACE(lie.name);
    TrainingState state = SomeState("tiny", "sgd");
    lie.apply(state);
    EXPECT_THAT(EncodeCheckpoint(*model, sgd, state).status(),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr("cannot encode checkpoint"),
                               HasSubstr(lie.name == "optimizer_name of "
                                                     "another optimizer"
                                             ? "is not sgd, the optimizer's"
                                             : lie.message))));
  }
}

// As for a bad checksum: the resume falls back to the older checkpoint and
// says why.
TEST(CheckpointFieldsTest, LatestSkipsACheckpointWhoseFieldsLie) {
  const std::string root = MakeTempDir();
  absl::StatusOr<CheckpointDir> dir = CheckpointDir::Open(root, 3);
  ASSERT_TRUE(dir.ok());
  const std::string good = TinyCheckpoint(1);
  ASSERT_TRUE(dir->Save(100, good).ok());
  TrainingState state = SomeState("tiny", "sgd");
  state.global_step = kInt64Max;
  WriteRaw(absl::StrCat(root, "/checkpoint-000000200.dtc"),
           WithState(good, state));
  absl::StatusOr<CheckpointDir::Found> latest = dir->Latest();
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->path, absl::StrCat(root, "/checkpoint-000000100.dtc"));
  ASSERT_THAT(latest->skipped, SizeIs(1));
  EXPECT_THAT(latest->skipped[0],
              AllOf(HasSubstr("checkpoint-000000200.dtc: "),
                    HasSubstr("global_step is 9223372036854775807")));
}

}  // namespace
}  // namespace dtrain::trainer
