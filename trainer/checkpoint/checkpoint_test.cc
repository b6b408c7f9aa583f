#include "trainer/checkpoint/checkpoint.h"

#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/archive.h>
#include <torch/types.h>
#include <torch/utils.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/atomic_file.h"
#include "base/torch_compat.h"
#include "data/distributed_sampler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/model.h"
#include "models/registry.h"
#include "optim/adadelta.h"
#include "trainer/checkpoint/checkpoint_dir.h"

namespace dtrain::trainer {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

// A small network with buffers (batch norm's running statistics and its
// int64 num_batches_tracked), unlike the ConvNet.
struct TinyImpl : torch::nn::Module {
  explicit TinyImpl(int64_t in = 4, int64_t hidden = 8, bool extra = false) {
    fc = register_module("fc", torch::nn::Linear(in, hidden));
    bn = register_module("bn", torch::nn::BatchNorm1d(hidden));
    head = register_module("head", torch::nn::Linear(hidden, 3));
    if (extra) tail = register_module("tail", torch::nn::Linear(3, 3));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor y = head(torch::relu(bn(fc(x))));
    return tail.is_empty() ? y : tail(y);
  }
  torch::nn::Linear fc{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
  torch::nn::Linear head{nullptr};
  torch::nn::Linear tail{nullptr};
};
TORCH_MODULE(Tiny);

// CRC-32 (the polynomial of zlib and gzip) written out bit by bit, so that
// the test checks the header against an independent implementation.
uint32_t ReferenceCrc32(absl::string_view data) {
  uint32_t crc = 0xffffffffu;
  for (unsigned char c : data) {
    crc ^= c;
    for (int k = 0; k < 8; ++k)
      crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1)));
  }
  return ~crc;
}

uint64_t ReadLittleEndian(absl::string_view bytes, size_t offset, int size) {
  uint64_t value = 0;
  for (int i = 0; i < size; ++i) {
    value |= uint64_t{static_cast<unsigned char>(bytes[offset + i])} << (8 * i);
  }
  return value;
}

std::string MakeHeader(uint32_t version, absl::string_view payload) {
  std::string out = "DTRAINCK";
  auto put = [&out](uint64_t value, int size) {
    for (int i = 0; i < size; ++i)
      out.push_back(static_cast<char>(value >> (8 * i)));
  };
  put(version, 4);
  put(payload.size(), 8);
  put(ReferenceCrc32(payload), 4);
  return out;
}

bool BitwiseEqual(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) {
    return false;
  }
  const torch::Tensor ca = a.detach().cpu().contiguous();
  const torch::Tensor cb = b.detach().cpu().contiguous();
  // memcmp must not see the null data of an empty tensor.
  return ca.nbytes() == 0 ||
         std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

// Every parameter and buffer, by name, bit for bit.
void ExpectSameTensors(const torch::nn::Module& a, const torch::nn::Module& b) {
  const auto pa = a.named_parameters();
  const auto pb = b.named_parameters();
  ASSERT_EQ(pa.keys(), pb.keys());
  for (const auto& item : pa) {
    EXPECT_TRUE(BitwiseEqual(item.value(), pb[item.key()]))
        << "parameter " << item.key();
  }
  const auto ba = a.named_buffers();
  const auto bb = b.named_buffers();
  ASSERT_EQ(ba.keys(), bb.keys());
  for (const auto& item : ba) {
    EXPECT_TRUE(BitwiseEqual(item.value(), bb[item.key()]))
        << "buffer " << item.key();
  }
}

// Copies of a module's tensors, to check later that it did not change.
std::vector<torch::Tensor> Snapshot(const torch::nn::Module& module) {
  std::vector<torch::Tensor> out;
  for (const torch::Tensor& t : module.parameters()) out.push_back(t.clone());
  for (const torch::Tensor& t : module.buffers()) out.push_back(t.clone());
  return out;
}

void ExpectUnchanged(const std::vector<torch::Tensor>& snapshot,
                     const torch::nn::Module& module) {
  std::vector<torch::Tensor> now = Snapshot(module);
  ASSERT_EQ(now.size(), snapshot.size());
  for (size_t i = 0; i < now.size(); ++i) {
    EXPECT_TRUE(BitwiseEqual(now[i], snapshot[i])) << "tensor " << i;
  }
}

const torch::Tensor* MomentumOf(torch::optim::SGD& sgd,
                                const torch::Tensor& param) {
  auto it = sgd.state().find(torch_compat::OptimizerStateKeyOf(param));
  if (it == sgd.state().end()) return nullptr;
  return &static_cast<torch::optim::SGDParamState&>(*it->second)
              .momentum_buffer();
}

TrainingState SomeState(absl::string_view model, absl::string_view optimizer) {
  TrainingState state;
  state.epoch = 3;
  state.sampler.epoch = 3;
  state.sampler.position = 512;
  state.sampler.dataset_size = 60000;
  state.sampler.num_replicas = 4;
  state.sampler.seed = 17;
  state.sampler.shuffle = true;
  state.sampler.drop_last = true;
  state.global_step = 12345;
  state.best_top1 = 98.765432109876;
  state.model_name = std::string(model);
  state.optimizer_name = std::string(optimizer);
  state.seed = std::numeric_limits<uint64_t>::max() - 1;  // above int64's max
  state.config_json = "{\"lr\": 0.01,\n \"note\": \"caf\xc3\xa9 \\u00e9\"}";
  return state;
}

torch::Tensor TinyLoss(Tiny& model, int64_t seed) {
  torch::manual_seed(seed);
  torch::Tensor x = torch::randn({6, 4});
  torch::Tensor target = torch::randn({6, 3});
  return (model->forward(x) - target).pow(2).mean();
}

template <typename Optimizer>
void TinyStep(Tiny& model, Optimizer& optimizer, int64_t seed) {
  optimizer.zero_grad();
  TinyLoss(model, seed).backward();
  optimizer.step();
}

std::shared_ptr<models::Model> MakeConvNet(int64_t seed,
                                           const models::ModelConfig& config) {
  torch::manual_seed(seed);
  absl::StatusOr<std::shared_ptr<models::Model>> model =
      models::CreateModel("convnet", config);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *model : nullptr;
}

// One SGD step on a fixed batch; the seed also fixes the dropout masks.
void ConvNetStep(models::Model& model, torch::optim::SGD& sgd, int64_t seed) {
  torch::manual_seed(seed);
  torch::Tensor x = torch::randn({4, 1, 28, 28});
  torch::Tensor labels = torch::randint(10, {4}, torch::kLong);
  sgd.zero_grad();
  torch::nll_loss(model.forward(x), labels).backward();
  sgd.step();
}

// A valid checkpoint of a Tiny model with SGD state.
std::string TinyCheckpoint(int64_t seed = 1) {
  torch::manual_seed(seed);
  Tiny model;
  torch::optim::SGD sgd(model->parameters(),
                        torch::optim::SGDOptions(0.1).momentum(0.9));
  TinyStep(model, sgd, seed);
  absl::StatusOr<std::string> bytes =
      EncodeCheckpoint(*model, sgd, SomeState("tiny", "sgd"));
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? *bytes : "";
}

std::string MakeTempDir() {
  std::string templ =
      absl::StrCat(testing::TempDir(), "/checkpoint_test.XXXXXX");
  if (mkdtemp(templ.data()) == nullptr) {
    ADD_FAILURE() << "mkdtemp(" << templ << ") failed";
  }
  return templ;
}

void WriteRaw(const std::string& path, absl::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

std::vector<std::string> FilesIn(const std::string& dir) {
  std::vector<std::string> names;
  // The test only needs the names; a DIR* loop is enough.
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const struct dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    ::closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// --- Encoding and decoding ------------------------------------------------

TEST(CheckpointTest, HeaderIsMagicVersionLengthAndCrcLittleEndian) {
  const std::string bytes = TinyCheckpoint();
  ASSERT_GT(bytes.size(), kCheckpointHeaderSize);
  EXPECT_EQ(bytes.substr(0, 8), "DTRAINCK");
  EXPECT_EQ(ReadLittleEndian(bytes, 8, 4), 2u);
  const absl::string_view payload =
      absl::string_view(bytes).substr(kCheckpointHeaderSize);
  EXPECT_EQ(ReadLittleEndian(bytes, 12, 8), payload.size());
  EXPECT_EQ(ReadLittleEndian(bytes, 20, 4), ReferenceCrc32(payload));
  // The payload's first section is the model's.
  EXPECT_EQ(payload.substr(0, 4), "MODL");
  EXPECT_TRUE(ValidateCheckpointBytes(bytes).ok());
}

TEST(CheckpointTest, ConvNetWithSgdRoundTripsAndContinuesIdentically) {
  std::shared_ptr<models::Model> model = MakeConvNet(1, {});
  const torch::optim::SGDOptions options =
      torch::optim::SGDOptions(0.01).momentum(0.9);
  torch::optim::SGD sgd(model->parameters(), options);
  ConvNetStep(*model, sgd, 10);
  ConvNetStep(*model, sgd, 11);
  const TrainingState state = SomeState("convnet", "sgd");
  absl::StatusOr<std::string> bytes = EncodeCheckpoint(*model, sgd, state);
  ASSERT_TRUE(bytes.ok()) << bytes.status();

  std::shared_ptr<models::Model> restored = MakeConvNet(2, {});
  torch::optim::SGD restored_sgd(restored->parameters(), options);
  absl::StatusOr<TrainingState> decoded =
      DecodeCheckpoint(*bytes, *restored, restored_sgd, "convnet", "sgd");
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, state);
  EXPECT_EQ(decoded->seed, state.seed);
  ExpectSameTensors(*model, *restored);

  const std::vector<torch::Tensor> params = model->parameters();
  const std::vector<torch::Tensor> restored_params = restored->parameters();
  ASSERT_EQ(params.size(), restored_params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const torch::Tensor* momentum = MomentumOf(sgd, params[i]);
    const torch::Tensor* restored_momentum =
        MomentumOf(restored_sgd, restored_params[i]);
    ASSERT_NE(momentum, nullptr) << i;
    ASSERT_NE(restored_momentum, nullptr) << i;
    EXPECT_TRUE(BitwiseEqual(*momentum, *restored_momentum)) << i;
    // Loaded where the parameter lives.
    EXPECT_EQ(restored_momentum->device(), restored_params[i].device());
  }

  ConvNetStep(*model, sgd, 12);
  ConvNetStep(*restored, restored_sgd, 12);
  ExpectSameTensors(*model, *restored);
}

TEST(CheckpointTest, TinyWithBuffersAndAdadeltaRoundTrips) {
  torch::manual_seed(1);
  Tiny model;
  optim::Adadelta adadelta(model->parameters(),
                           optim::AdadeltaOptions().lr(0.5).rho(0.8));
  TinyStep(model, adadelta, 10);
  TinyStep(model, adadelta, 11);
  ASSERT_EQ(model->bn->num_batches_tracked.item<int64_t>(), 2);
  const TrainingState state = SomeState("tiny", "adadelta");
  absl::StatusOr<std::string> bytes = EncodeCheckpoint(*model, adadelta, state);
  ASSERT_TRUE(bytes.ok()) << bytes.status();

  torch::manual_seed(2);
  Tiny restored;
  optim::Adadelta restored_adadelta(restored->parameters());
  absl::StatusOr<TrainingState> decoded =
      DecodeCheckpoint(*bytes, *restored, restored_adadelta);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, state);
  ExpectSameTensors(*model, *restored);

  const std::vector<torch::Tensor> params = model->parameters();
  const std::vector<torch::Tensor> restored_params = restored->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    const optim::AdadeltaParamState* a = adadelta.StateOf(params[i]);
    const optim::AdadeltaParamState* b =
        restored_adadelta.StateOf(restored_params[i]);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(a->step(), b->step());
    EXPECT_TRUE(BitwiseEqual(a->square_avg(), b->square_avg())) << i;
    EXPECT_TRUE(BitwiseEqual(a->acc_delta(), b->acc_delta())) << i;
  }
  // Adadelta restores its options too (optim/adadelta.h).
  const auto& options = static_cast<const optim::AdadeltaOptions&>(
      restored_adadelta.param_groups()[0].options());
  EXPECT_EQ(options.lr(), 0.5);
  EXPECT_EQ(options.rho(), 0.8);

  TinyStep(model, adadelta, 12);
  TinyStep(restored, restored_adadelta, 12);
  ExpectSameTensors(*model, *restored);
}

TEST(CheckpointTest, DefaultTrainingStateRoundTrips) {
  torch::manual_seed(1);
  Tiny model;
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  absl::StatusOr<std::string> bytes = EncodeCheckpoint(*model, sgd, {});
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  Tiny restored;
  torch::optim::SGD restored_sgd(restored->parameters(),
                                 torch::optim::SGDOptions(0.1));
  absl::StatusOr<TrainingState> decoded =
      DecodeCheckpoint(*bytes, *restored, restored_sgd);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, TrainingState());
}

// LibTorch's SGD::load merges saved state into the existing one and keeps
// its options; DecodeCheckpoint replaces the state as PyTorch does, but the
// learning rate stays the optimizer's own.
TEST(CheckpointTest, DecodeReplacesSgdStateButKeepsItsOptions) {
  torch::manual_seed(1);
  Tiny model;
  torch::optim::SGD sgd(model->parameters(),
                        torch::optim::SGDOptions(0.1).momentum(0.9));
  // Encoded before any step: no momentum buffers.
  absl::StatusOr<std::string> bytes = EncodeCheckpoint(*model, sgd, {});
  ASSERT_TRUE(bytes.ok()) << bytes.status();

  Tiny restored;
  torch::optim::SGD restored_sgd(restored->parameters(),
                                 torch::optim::SGDOptions(0.3).momentum(0.5));
  TinyStep(restored, restored_sgd, 5);
  ASSERT_THAT(restored_sgd.state(), SizeIs(restored->parameters().size()));
  ASSERT_TRUE(DecodeCheckpoint(*bytes, *restored, restored_sgd).ok());
  EXPECT_THAT(restored_sgd.state(), IsEmpty());
  const auto& options = static_cast<const torch::optim::SGDOptions&>(
      restored_sgd.param_groups()[0].options());
  EXPECT_EQ(options.lr(), 0.3);
  EXPECT_EQ(options.momentum(), 0.5);
}

// --- Damaged and foreign bytes ---------------------------------------------

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
                 "reads version 2"});
  std::string version3 = good;
  version3[8] = 3;
  out.push_back({"version 3", version3, absl::StatusCode::kInvalidArgument,
                 "unsupported checkpoint format version 3 (this build reads "
                 "version 2)"});

  std::mt19937 random(7);
  std::string noise(1000, '\0');
  for (char& c : noise) c = static_cast<char>(random());
  noise[0] = 'x';
  out.push_back({"random bytes", noise, absl::StatusCode::kInvalidArgument,
                 "not a dtrain checkpoint (magic \"x"});
  torch::serialize::OutputArchive archive;
  archive.write("weight", torch::ones({3}));
  std::ostringstream torch_file;
  archive.save_to(torch_file);
  out.push_back({"plain torch archive", torch_file.str(),
                 absl::StatusCode::kInvalidArgument,
                 "not a dtrain checkpoint (magic \"PK\\x03\\x04"});
  out.push_back({"text", "DTRAINCX and more",
                 absl::StatusCode::kInvalidArgument,
                 "instead of \"DTRAINCK\""});
  return out;
}

TEST(CheckpointTest, DamagedOrForeignBytesAreRejectedWithoutChangingAnything) {
  const std::string good = TinyCheckpoint(1);
  torch::manual_seed(2);
  Tiny model;
  torch::optim::SGD sgd(model->parameters(),
                        torch::optim::SGDOptions(0.1).momentum(0.9));
  TinyStep(model, sgd, 3);
  const std::vector<torch::Tensor> before = Snapshot(*model);
  for (const Damaged& damaged : DamagedVersions(good)) {
    SCOPED_TRACE(damaged.name);
    const absl::Status valid = ValidateCheckpointBytes(damaged.bytes);
    EXPECT_EQ(valid.code(), damaged.code) << valid;
    EXPECT_THAT(std::string(valid.message()), HasSubstr(damaged.message));
    absl::StatusOr<TrainingState> decoded =
        DecodeCheckpoint(damaged.bytes, *model, sgd);
    EXPECT_EQ(decoded.status(), valid);
    ExpectUnchanged(before, *model);
    EXPECT_THAT(sgd.state(), SizeIs(model->parameters().size()));
  }
}

// The momentum buffers of `sgd` for `model`'s parameters (undefined where
// there is none), copied.
std::vector<torch::Tensor> MomentumSnapshot(torch::optim::SGD& sgd,
                                            const torch::nn::Module& model) {
  std::vector<torch::Tensor> out;
  for (const torch::Tensor& param : model.parameters()) {
    const torch::Tensor* momentum = MomentumOf(sgd, param);
    out.push_back(momentum == nullptr ? torch::Tensor() : momentum->clone());
  }
  return out;
}

void ExpectSameMomentum(const std::vector<torch::Tensor>& snapshot,
                        torch::optim::SGD& sgd,
                        const torch::nn::Module& model) {
  const std::vector<torch::Tensor> now = MomentumSnapshot(sgd, model);
  ASSERT_EQ(now.size(), snapshot.size());
  EXPECT_THAT(sgd.state(), SizeIs(model.parameters().size()));
  for (size_t i = 0; i < now.size(); ++i) {
    ASSERT_EQ(now[i].defined(), snapshot[i].defined()) << i;
    if (now[i].defined()) {
      EXPECT_TRUE(BitwiseEqual(now[i], snapshot[i])) << "momentum " << i;
    }
  }
}

// Randomized: payload mutations behind a recomputed, valid header reach the
// payload reader. Each must be decoded or rejected, never crash (run it
// under --config=asan too), and a rejection must leave the model and the
// optimizer alone.
TEST(CheckpointTest, RandomPayloadDamageBehindAValidHeaderIsHandled) {
  const std::string good = TinyCheckpoint(1);
  const std::string payload = good.substr(kCheckpointHeaderSize);
  torch::manual_seed(2);
  Tiny model;
  torch::optim::SGD sgd(model->parameters(),
                        torch::optim::SGDOptions(0.1).momentum(0.9));
  TinyStep(model, sgd, 3);
  std::mt19937_64 rng(7);
  int decoded_ok = 0;
  int rejected = 0;
  int data_loss = 0;
  constexpr int kMutations = 2000;
  for (int i = 0; i < kMutations; ++i) {
    std::string damaged = payload;
    switch (i % 6) {
      case 0:  // a few flipped bits
        for (int k = 0; k < 1 + static_cast<int>(rng() % 4); ++k)
          damaged[rng() % damaged.size()] ^=
              static_cast<char>(1 << (rng() % 8));
        break;
      case 1:  // cut short
        damaged.resize(rng() % damaged.size());
        break;
      case 2:  // a run of random bytes
        for (size_t at = rng() % damaged.size(), k = 0;
             k < 64 && at + k < damaged.size(); ++k)
          damaged[at + k] = static_cast<char>(rng() & 0xff);
        break;
      case 3:  // the end (the training state) overwritten
        for (size_t k = 1; k <= std::min<size_t>(200, damaged.size()); ++k)
          if (rng() % 3 == 0)
            damaged[damaged.size() - k] = static_cast<char>(rng() & 0xff);
        break;
      case 4: {  // a lying length, count or size: 4 or 8 extreme bytes
        const size_t width = rng() % 2 == 0 ? 4 : 8;
        const size_t at = rng() % (damaged.size() - width);
        static constexpr uint64_t kValues[] = {
            0xffffffffffffffffu, 0x7fffffffffffffffu, 0x8000000000000000u,
            0x00000000ffffffffu, 0x000000007fffffffu, 0x0000000000010000u};
        const uint64_t value = rng() % 4 == 0 ? rng() : kValues[rng() % 6];
        for (size_t k = 0; k < width; ++k)
          damaged[at + k] = static_cast<char>(value >> (8 * k));
        break;
      }
      default: {  // bytes inserted or deleted: everything after shifts
        const size_t at = rng() % damaged.size();
        const size_t n = 1 + rng() % 8;
        if (rng() % 2 == 0) {
          damaged.insert(at, std::string(n, static_cast<char>(rng() & 0xff)));
        } else {
          damaged.erase(at, n);
        }
        break;
      }
    }
    const std::vector<torch::Tensor> before = Snapshot(*model);
    const std::vector<torch::Tensor> momentum = MomentumSnapshot(sgd, *model);
    const std::string bytes = MakeHeader(2, damaged) + damaged;
    ASSERT_TRUE(ValidateCheckpointBytes(bytes).ok());
    absl::StatusOr<TrainingState> state = DecodeCheckpoint(bytes, *model, sgd);
    if (state.ok()) {
      ++decoded_ok;
      // The next mutation starts from a model with every momentum buffer.
      TinyStep(model, sgd, 3);
    } else {
      ++rejected;
      if (state.status().code() == absl::StatusCode::kDataLoss) ++data_loss;
      ExpectUnchanged(before, *model);
      ExpectSameMomentum(momentum, sgd, *model);
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
// the header, is caught by the header checks alone.
TEST(CheckpointTest, RandomDamageAnywhereIsRejectedByTheHeaderChecks) {
  const std::string good = TinyCheckpoint(1);
  torch::manual_seed(2);
  Tiny model;
  torch::optim::SGD sgd(model->parameters(),
                        torch::optim::SGDOptions(0.1).momentum(0.9));
  TinyStep(model, sgd, 3);
  const std::vector<torch::Tensor> before = Snapshot(*model);
  const std::vector<torch::Tensor> momentum = MomentumSnapshot(sgd, *model);
  std::mt19937_64 rng(11);
  int data_loss = 0;
  int invalid_argument = 0;
  constexpr int kMutations = 2000;
  for (int i = 0; i < kMutations; ++i) {
    std::string damaged = good;
    // Redrawn in the rare case that the damage cancels out (a bit flipped
    // twice, random bytes equal to the old ones).
    while (damaged == good) {
      switch (i % 6) {
        case 0:  // a few flipped bits
          for (int k = 0; k < 1 + static_cast<int>(rng() % 4); ++k)
            damaged[rng() % damaged.size()] ^=
                static_cast<char>(1 << (rng() % 8));
          break;
        case 1:  // cut short
          damaged.resize(rng() % damaged.size());
          break;
        case 2:  // a run of random bytes
          for (size_t at = rng() % damaged.size(), k = 0;
               k < 64 && at + k < damaged.size(); ++k)
            damaged[at + k] = static_cast<char>(rng() & 0xff);
          break;
        case 3:  // random bytes in the header
          for (int k = 0; k < 1 + static_cast<int>(rng() % 4); ++k)
            damaged[rng() % kCheckpointHeaderSize] =
                static_cast<char>(rng() & 0xff);
          break;
        case 4: {  // bytes inserted or deleted
          const size_t at = rng() % damaged.size();
          const size_t n = 1 + rng() % 8;
          if (rng() % 2 == 0) {
            damaged.insert(at, std::string(n, static_cast<char>(rng() & 0xff)));
          } else {
            damaged.erase(at, n);
          }
          break;
        }
        default:  // bytes appended
          damaged.append(1 + rng() % 100, static_cast<char>(rng() & 0xff));
          break;
      }
    }
    const absl::Status valid = ValidateCheckpointBytes(damaged);
    ASSERT_FALSE(valid.ok()) << "mutation " << i;
    if (valid.code() == absl::StatusCode::kDataLoss) {
      ++data_loss;
    } else {
      EXPECT_EQ(valid.code(), absl::StatusCode::kInvalidArgument) << valid;
      ++invalid_argument;
    }
    EXPECT_EQ(DecodeCheckpoint(damaged, *model, sgd).status(), valid);
  }
  ExpectUnchanged(before, *model);
  ExpectSameMomentum(momentum, sgd, *model);
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
  const std::vector<torch::Tensor> before = Snapshot(*model);
  const std::string bytes = MakeHeader(2, payload) + payload;
  EXPECT_TRUE(ValidateCheckpointBytes(bytes).ok());
  absl::StatusOr<TrainingState> decoded = DecodeCheckpoint(bytes, *model, sgd);
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(decoded.status().message()),
              HasSubstr("malformed checkpoint payload: expected section MODL "
                        "at offset 0, found \"not \""));
  ExpectUnchanged(before, *model);

  // A LibTorch archive (what version 1 held) behind a version 2 header.
  torch::serialize::OutputArchive archive;
  archive.write("weight", torch::ones({3}));
  std::ostringstream stream;
  archive.save_to(stream);
  const std::string archive_bytes = MakeHeader(2, stream.str()) + stream.str();
  decoded = DecodeCheckpoint(archive_bytes, *model, sgd);
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(decoded.status().message()),
              HasSubstr("expected section MODL at offset 0, found "
                        "\"PK\\x03\\x04\""));
  ExpectUnchanged(before, *model);

  // Behind a version 1 header: that version is no longer read at all.
  const std::string version1 = MakeHeader(1, stream.str()) + stream.str();
  EXPECT_EQ(ValidateCheckpointBytes(version1).code(),
            absl::StatusCode::kInvalidArgument);
  decoded = DecodeCheckpoint(version1, *model, sgd);
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(decoded.status().message()),
              HasSubstr("checkpoint format version 1 is no longer read"));
  ExpectUnchanged(before, *model);
}

// --- Checkpoints that do not fit --------------------------------------------

struct Target {
  std::shared_ptr<models::Model> model;
  std::unique_ptr<torch::optim::SGD> sgd;
  std::vector<torch::Tensor> before;
};

Target MakeTarget(const models::ModelConfig& config) {
  Target target;
  target.model = MakeConvNet(5, config);
  target.sgd = std::make_unique<torch::optim::SGD>(
      target.model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  target.before = Snapshot(*target.model);
  return target;
}

std::string ConvNetCheckpoint(const models::ModelConfig& config) {
  std::shared_ptr<models::Model> model = MakeConvNet(1, config);
  torch::optim::SGD sgd(model->parameters(),
                        torch::optim::SGDOptions(0.1).momentum(0.9));
  ConvNetStep(*model, sgd, 3);
  absl::StatusOr<std::string> bytes =
      EncodeCheckpoint(*model, sgd, SomeState("convnet", "sgd"));
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? *bytes : "";
}

TEST(CheckpointTest, ShapeMismatchNamesParameterAndBothShapes) {
  models::ModelConfig size32;
  size32.image_size = 32;
  Target target = MakeTarget(size32);
  absl::StatusOr<TrainingState> decoded =
      DecodeCheckpoint(ConvNetCheckpoint({}), *target.model, *target.sgd);
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kFailedPrecondition);
  // fc1 takes 32 * 12 * 12 features for 28x28 images, 32 * 14 * 14 for 32.
  EXPECT_THAT(std::string(decoded.status().message()),
              HasSubstr("parameter fc1.weight has shape [64, 4608] in the "
                        "checkpoint, [64, 6272] in the model"));
  ExpectUnchanged(target.before, *target.model);
  EXPECT_THAT(target.sgd->state(), IsEmpty());
}

TEST(CheckpointTest, NumClassesMismatchNamesTheFirstDifferentParameter) {
  models::ModelConfig five_classes;
  five_classes.num_classes = 5;
  Target target = MakeTarget(five_classes);
  absl::StatusOr<TrainingState> decoded =
      DecodeCheckpoint(ConvNetCheckpoint({}), *target.model, *target.sgd);
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(decoded.status().message()),
              HasSubstr("parameter fc2.weight has shape [10, 64] in the "
                        "checkpoint, [5, 64] in the model"));
  ExpectUnchanged(target.before, *target.model);
}

TEST(CheckpointTest, MissingUnexpectedAndDtypeMismatchesAreNamed) {
  const std::string bytes = TinyCheckpoint();
  {
    torch::manual_seed(3);
    Tiny bigger(4, 8, /*extra=*/true);
    torch::optim::SGD sgd(bigger->parameters(), torch::optim::SGDOptions(0.1));
    const std::vector<torch::Tensor> before = Snapshot(*bigger);
    absl::StatusOr<TrainingState> decoded =
        DecodeCheckpoint(bytes, *bigger, sgd);
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(decoded.status().message()),
                HasSubstr("it has no parameter tail.weight (model shape "
                          "[3, 3])"));
    ExpectUnchanged(before, *bigger);
  }
  {
    // Save the bigger model, load into the smaller one.
    torch::manual_seed(3);
    Tiny bigger(4, 8, /*extra=*/true);
    torch::optim::SGD sgd(bigger->parameters(), torch::optim::SGDOptions(0.1));
    absl::StatusOr<std::string> big_bytes = EncodeCheckpoint(*bigger, sgd, {});
    ASSERT_TRUE(big_bytes.ok());
    Tiny smaller;
    torch::optim::SGD smaller_sgd(smaller->parameters(),
                                  torch::optim::SGDOptions(0.1));
    const std::vector<torch::Tensor> before = Snapshot(*smaller);
    absl::StatusOr<TrainingState> decoded =
        DecodeCheckpoint(*big_bytes, *smaller, smaller_sgd);
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(decoded.status().message()),
                HasSubstr("it has parameter tail.weight, which the model "
                          "does not"));
    ExpectUnchanged(before, *smaller);
  }
  {
    Tiny double_model;
    double_model->to(torch::kDouble);
    torch::optim::SGD sgd(double_model->parameters(),
                          torch::optim::SGDOptions(0.1));
    const std::vector<torch::Tensor> before = Snapshot(*double_model);
    absl::StatusOr<TrainingState> decoded =
        DecodeCheckpoint(bytes, *double_model, sgd);
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(decoded.status().message()),
                HasSubstr("parameter fc.weight has dtype Float in the "
                          "checkpoint, Double in the model"));
    ExpectUnchanged(before, *double_model);
  }
}

TEST(CheckpointTest, ModelAndOptimizerNamesAreChecked) {
  const std::string bytes = ConvNetCheckpoint({});
  Target target = MakeTarget({});
  absl::StatusOr<TrainingState> decoded =
      DecodeCheckpoint(bytes, *target.model, *target.sgd, "resnet18", "sgd");
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(decoded.status().message()),
              HasSubstr("the checkpoint is of model \"convnet\", not "
                        "\"resnet18\""));
  decoded = DecodeCheckpoint(bytes, *target.model, *target.sgd, "convnet",
                             "adadelta");
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(decoded.status().message()),
              HasSubstr("optimizer \"sgd\", not \"adadelta\""));
  ExpectUnchanged(target.before, *target.model);
  EXPECT_THAT(target.sgd->state(), IsEmpty());

  decoded =
      DecodeCheckpoint(bytes, *target.model, *target.sgd, "convnet", "sgd");
  EXPECT_TRUE(decoded.ok()) << decoded.status();
}

TEST(CheckpointTest, OptimizerStateThatDoesNotFitChangesNothing) {
  const std::string bytes = TinyCheckpoint();  // SGD with momentum
  {
    // Another optimizer type.
    torch::manual_seed(3);
    Tiny model;
    optim::Adadelta adadelta(model->parameters());
    TinyStep(model, adadelta, 4);
    const std::vector<torch::Tensor> before = Snapshot(*model);
    absl::StatusOr<TrainingState> decoded =
        DecodeCheckpoint(bytes, *model, adadelta);
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(decoded.status().message()),
                HasSubstr("optimizer state does not fit the optimizer: the "
                          "checkpoint holds sgd state, the optimizer is "
                          "adadelta"));
    ExpectUnchanged(before, *model);
    for (const torch::Tensor& param : model->parameters()) {
      EXPECT_NE(adadelta.StateOf(param), nullptr);
    }
  }
  {
    // And the other way round.
    torch::manual_seed(3);
    Tiny model;
    optim::Adadelta adadelta(model->parameters());
    TinyStep(model, adadelta, 4);
    absl::StatusOr<std::string> adadelta_bytes =
        EncodeCheckpoint(*model, adadelta, {});
    ASSERT_TRUE(adadelta_bytes.ok()) << adadelta_bytes.status();
    torch::optim::SGD sgd(model->parameters(),
                          torch::optim::SGDOptions(0.1).momentum(0.9));
    TinyStep(model, sgd, 5);
    const std::vector<torch::Tensor> before = Snapshot(*model);
    absl::StatusOr<TrainingState> decoded =
        DecodeCheckpoint(*adadelta_bytes, *model, sgd);
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(decoded.status().message()),
                HasSubstr("the checkpoint holds adadelta state, the optimizer "
                          "is sgd"));
    ExpectUnchanged(before, *model);
    EXPECT_THAT(sgd.state(), SizeIs(model->parameters().size()));
  }
  {
    // An optimizer over only some of the parameters.
    torch::manual_seed(3);
    Tiny model;
    torch::optim::SGD sgd(model->fc->parameters(),
                          torch::optim::SGDOptions(0.1).momentum(0.9));
    TinyStep(model, sgd, 4);
    const std::vector<torch::Tensor> before = Snapshot(*model);
    absl::StatusOr<TrainingState> decoded =
        DecodeCheckpoint(bytes, *model, sgd);
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(decoded.status().message()),
                HasSubstr("parameter group 0 has 6 parameters in the "
                          "checkpoint, 2 in the optimizer"));
    ExpectUnchanged(before, *model);
    EXPECT_THAT(sgd.state(), SizeIs(2));
  }
  {
    // The same parameters in two groups.
    torch::manual_seed(3);
    Tiny model;
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(model->fc->parameters());
    std::vector<torch::Tensor> rest = model->bn->parameters();
    for (const torch::Tensor& t : model->head->parameters()) rest.push_back(t);
    groups.emplace_back(rest);
    torch::optim::SGD sgd(groups, torch::optim::SGDOptions(0.1).momentum(0.9));
    TinyStep(model, sgd, 4);
    const std::vector<torch::Tensor> before = Snapshot(*model);
    absl::StatusOr<TrainingState> decoded =
        DecodeCheckpoint(bytes, *model, sgd);
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(decoded.status().message()),
                HasSubstr("the checkpoint has 1 parameter groups, the "
                          "optimizer 2"));
    ExpectUnchanged(before, *model);
    EXPECT_THAT(sgd.state(), SizeIs(6));
  }
  {
    // The model's parameters in another order: state goes by position.
    torch::manual_seed(3);
    Tiny model;
    std::vector<torch::Tensor> reversed = model->parameters();
    std::reverse(reversed.begin(), reversed.end());
    torch::optim::SGD sgd(reversed,
                          torch::optim::SGDOptions(0.1).momentum(0.9));
    TinyStep(model, sgd, 4);
    const std::vector<torch::Tensor> before = Snapshot(*model);
    absl::StatusOr<TrainingState> decoded =
        DecodeCheckpoint(bytes, *model, sgd);
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(decoded.status().message()),
                HasSubstr("parameter 0 of group 0 has shape [3], its state "
                          "in the checkpoint [8, 4]"));
    ExpectUnchanged(before, *model);
    EXPECT_THAT(sgd.state(), SizeIs(6));
  }
  {
    // An optimizer checkpoints do not support.
    torch::manual_seed(3);
    Tiny model;
    torch::optim::Adam adam(model->parameters());
    const std::vector<torch::Tensor> before = Snapshot(*model);
    absl::StatusOr<TrainingState> decoded =
        DecodeCheckpoint(bytes, *model, adam);
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(decoded.status().message()),
                HasSubstr("the optimizer is neither"));
    ExpectUnchanged(before, *model);
  }
}

// --- The payload format ------------------------------------------------------

TEST(CheckpointTest, EncodeRejectsOtherOptimizersAndUnsupportedTensors) {
  torch::manual_seed(1);
  Tiny model;
  torch::optim::Adam adam(model->parameters());
  absl::StatusOr<std::string> bytes = EncodeCheckpoint(*model, adam, {});
  EXPECT_EQ(bytes.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bytes.status().message()),
              HasSubstr("checkpoints support sgd and adadelta"));

  torch::nn::Module complex;
  const torch::Tensor p = complex.register_parameter("p", torch::zeros({2}));
  complex.register_buffer("z", torch::zeros({2}, torch::kComplexFloat));
  torch::optim::SGD sgd({p}, torch::optim::SGDOptions(0.1));
  bytes = EncodeCheckpoint(complex, sgd, {});
  EXPECT_EQ(bytes.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bytes.status().message()),
              HasSubstr("buffer z has dtype ComplexFloat; checkpoints hold "
                        "float32, float64"));
}

// Every dtype of the format, a scalar, an empty tensor and a non-contiguous
// one round-trip bit for bit.
TEST(CheckpointTest, EveryDtypeAndShapeRoundTrips) {
  auto make = [](int64_t seed) {
    torch::manual_seed(seed);
    auto module = std::make_shared<torch::nn::Module>();
    module->register_parameter("f32", torch::randn({2, 3}));
    module->register_parameter("f64", torch::randn({4}, torch::kDouble));
    module->register_buffer("f16", torch::randn({3}).to(torch::kHalf));
    module->register_buffer("bf16", torch::randn({3}).to(torch::kBFloat16));
    module->register_buffer("i64",
                            torch::randint(-1000, 1000, {2, 2}, torch::kLong));
    module->register_buffer("i32",
                            torch::randint(-1000, 1000, {5}).to(torch::kInt));
    module->register_buffer("u8", torch::randint(0, 255, {7}).to(torch::kByte));
    module->register_buffer("i8",
                            torch::randint(-128, 127, {7}).to(torch::kChar));
    module->register_buffer(
        "i16", torch::randint(-999, 999, {1, 1, 3}).to(torch::kShort));
    module->register_buffer("b", torch::randint(0, 2, {6}).to(torch::kBool));
    module->register_buffer("scalar", torch::randn({}));
    module->register_buffer("empty", torch::zeros({0, 5}));
    module->register_buffer("strided", torch::randn({3, 4}).t());
    return module;
  };
  std::shared_ptr<torch::nn::Module> model = make(1);
  ASSERT_FALSE(model->named_buffers()["strided"].is_contiguous());
  torch::optim::SGD sgd(model->parameters(),
                        torch::optim::SGDOptions(0.1).momentum(0.9));
  for (torch::Tensor& p : model->parameters())
    p.mutable_grad() = p.detach().clone();
  sgd.step();
  absl::StatusOr<std::string> bytes = EncodeCheckpoint(*model, sgd, {});
  ASSERT_TRUE(bytes.ok()) << bytes.status();

  std::shared_ptr<torch::nn::Module> restored = make(2);
  torch::optim::SGD restored_sgd(restored->parameters(),
                                 torch::optim::SGDOptions(0.1));
  absl::StatusOr<TrainingState> decoded =
      DecodeCheckpoint(*bytes, *restored, restored_sgd);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ExpectSameTensors(*model, *restored);
  const std::vector<torch::Tensor> params = model->parameters();
  const std::vector<torch::Tensor> restored_params = restored->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    const torch::Tensor* a = MomentumOf(sgd, params[i]);
    const torch::Tensor* b = MomentumOf(restored_sgd, restored_params[i]);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    EXPECT_TRUE(BitwiseEqual(*a, *b)) << i;
  }
}

// Builds payloads field by field, as checkpoint.h describes the format.
class Payload {
 public:
  Payload& U8(uint8_t v) {
    bytes_.push_back(static_cast<char>(v));
    return *this;
  }
  Payload& U32(uint32_t v) { return Put(v, 4); }
  Payload& U64(uint64_t v) { return Put(v, 8); }
  Payload& I64(int64_t v) { return Put(static_cast<uint64_t>(v), 8); }
  Payload& F64(double v) {
    uint64_t bits;
    std::memcpy(&bits, &v, sizeof(bits));
    return Put(bits, 8);
  }
  Payload& Str(absl::string_view s) {
    U32(static_cast<uint32_t>(s.size()));
    return Raw(s);
  }
  Payload& Raw(absl::string_view s) {
    bytes_.append(s.data(), s.size());
    return *this;
  }
  Payload& Floats(const std::vector<float>& values) {
    return Raw(absl::string_view(reinterpret_cast<const char*>(values.data()),
                                 values.size() * sizeof(float)));
  }
  Payload& Section(absl::string_view tag, const Payload& body) {
    Raw(tag);
    U64(body.bytes_.size());
    return Raw(body.bytes_);
  }
  const std::string& bytes() const { return bytes_; }

 private:
  Payload& Put(uint64_t v, int size) {
    for (int i = 0; i < size; ++i)
      bytes_.push_back(static_cast<char>(v >> (8 * i)));
    return *this;
  }
  std::string bytes_;
};

// A model with one float32 parameter "w" of shape [2].
struct OneParamImpl : torch::nn::Module {
  OneParamImpl() { w = register_parameter("w", torch::tensor({1.5f, -2.0f})); }
  torch::Tensor w;
};
TORCH_MODULE(OneParam);

// The sections of a OneParam checkpoint with SGD (lr 0.1, momentum 0.9, no
// state) and SomeState("one", "sgd"), with the parts the tests replace.
struct OneParamSections {
  Payload w_tensor = Payload().U8(1).U8(1).I64(2).Floats({1.5f, -2.0f});
  Payload model = Payload().U32(1).Str("w").U8(0).Raw(w_tensor.bytes());
  Payload sgd_options = Payload().F64(0.1).F64(0.9).F64(0).F64(0).U8(0);
  Payload optimizer =
      Payload().U8(1).U32(1).Raw(sgd_options.bytes()).U32(1).U8(0);
  Payload state = StateSection(SomeState("one", "sgd"));

  static Payload StateSection(const TrainingState& s) {
    return Payload()
        .I64(s.epoch)
        .Str(s.sampler.Serialize())
        .I64(s.global_step)
        .F64(s.best_top1)
        .Str(s.model_name)
        .Str(s.optimizer_name)
        .U64(s.seed)
        .Str(s.config_json);
  }
  std::string Bytes() const {
    return Payload()
        .Section("MODL", model)
        .Section("OPTM", optimizer)
        .Section("STAT", state)
        .bytes();
  }
};

TEST(CheckpointTest, PayloadIsTheDocumentedFormat) {
  OneParam model;
  torch::optim::SGD sgd(model->parameters(),
                        torch::optim::SGDOptions(0.1).momentum(0.9));
  absl::StatusOr<std::string> bytes =
      EncodeCheckpoint(*model, sgd, SomeState("one", "sgd"));
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  const std::string payload = OneParamSections().Bytes();
  EXPECT_EQ(*bytes, MakeHeader(2, payload) + payload);

  // And with a momentum buffer (has-state 1, then the tensor).
  model->w.mutable_grad() = torch::tensor({1.0f, 2.0f});
  sgd.step();
  bytes = EncodeCheckpoint(*model, sgd, SomeState("one", "sgd"));
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  OneParamSections stepped;
  const std::vector<float> w(model->w.data_ptr<float>(),
                             model->w.data_ptr<float>() + 2);
  stepped.model = Payload().U32(1).Str("w").U8(0).U8(1).U8(1).I64(2).Floats(w);
  stepped.optimizer = Payload()
                          .U8(1)
                          .U32(1)
                          .Raw(stepped.sgd_options.bytes())
                          .U32(1)
                          .U8(1)
                          .U8(1)
                          .U8(1)
                          .I64(2)
                          .Floats({1.0f, 2.0f});
  EXPECT_EQ(*bytes, MakeHeader(2, stepped.Bytes()) + stepped.Bytes());
}

// Hand-made payloads behind valid headers, each with one field that lies.
TEST(CheckpointTest, PayloadFieldsThatLieAreDataLoss) {
  struct Case {
    std::string name;
    std::string payload;
    std::string message;
  };
  std::vector<Case> cases;
  auto add = [&cases](std::string name, const OneParamSections& sections,
                      std::string message) {
    cases.push_back({std::move(name), sections.Bytes(), std::move(message)});
  };
  auto with_tensor = [](const Payload& tensor) {
    OneParamSections s;
    s.model = Payload().U32(1).Str("w").U8(0).Raw(tensor.bytes());
    return s;
  };
  {
    OneParamSections s;
    s.model = Payload().U32(0xffffffffu).Str("w").U8(0).Raw(s.w_tensor.bytes());
    add("huge tensor count", s,
        "model tensor count at offset 12 is 4294967295, but the 24 bytes "
        "left hold at most 3");
  }
  {
    OneParamSections s;
    s.model = Payload()
                  .U32(1)
                  .U32(0xfffffff0u)
                  .Raw("w")
                  .U8(0)
                  .Raw(s.w_tensor.bytes());
    add("huge name length", s,
        "name of model tensor 0 needs 4294967280 bytes at offset 20, 20 left");
  }
  {
    OneParamSections s;
    s.model = Payload().U32(1).Str("w").U8(7).Raw(s.w_tensor.bytes());
    add("unknown kind", s, "has unknown kind 7");
  }
  add("dtype code 0", with_tensor(Payload().U8(0).U8(1).I64(2).Floats({1, 2})),
      "parameter \"w\" at offset 22 has unknown dtype code 0");
  add("dtype code 11",
      with_tensor(Payload().U8(11).U8(1).I64(2).Floats({1, 2})),
      "unknown dtype code 11");
  add("9 dimensions",
      with_tensor(Payload()
                      .U8(1)
                      .U8(9)
                      .I64(1)
                      .I64(1)
                      .I64(1)
                      .I64(1)
                      .I64(1)
                      .I64(1)
                      .I64(1)
                      .I64(1)
                      .I64(2)
                      .Floats({1, 2})),
      "has 9 dimensions (at most 8)");
  add("negative size", with_tensor(Payload().U8(1).U8(1).I64(-2)),
      "has a negative size -2");
  add("sizes whose product overflows",
      with_tensor(
          Payload().U8(1).U8(2).I64(int64_t{1} << 40).I64(int64_t{1} << 40)),
      "has too large a shape");
  add("empty, with huge other sizes",
      with_tensor(Payload()
                      .U8(1)
                      .U8(3)
                      .I64(0)
                      .I64(int64_t{1} << 40)
                      .I64(int64_t{1} << 40)),
      "has too large a shape");
  add("more data than there is",
      with_tensor(Payload().U8(1).U8(1).I64(1000).Floats({1, 2})),
      "data of parameter \"w\" needs 4000 bytes at offset 32, 8 left");
  add("a bool that is 2",
      with_tensor(Payload().U8(10).U8(1).I64(2).U8(0).U8(2)),
      "holds a bool that is not 0 or 1");
  {
    OneParamSections s;
    s.model = Payload()
                  .U32(2)
                  .Str("w")
                  .U8(0)
                  .Raw(s.w_tensor.bytes())
                  .Str("w")
                  .U8(0)
                  .Raw(s.w_tensor.bytes());
    add("a name twice", s, "parameter \"w\" is twice");
  }
  {
    OneParamSections s;
    s.model.U8(0);
    add("a byte left in MODL", s,
        "1 unexpected bytes at offset 40, the end of section MODL");
  }
  {
    OneParamSections s;
    s.optimizer = Payload().U8(3).U32(0);
    add("unknown optimizer kind", s, "unknown optimizer kind 3 at offset 52");
  }
  {
    OneParamSections s;
    s.optimizer =
        Payload().U8(1).U32(1000).Raw(s.sgd_options.bytes()).U32(1).U8(0);
    add("huge group count", s,
        "optimizer group count at offset 53 is 1000, but the 38 bytes left "
        "hold at most 1");
  }
  {
    OneParamSections s;
    s.optimizer =
        Payload().U8(1).U32(1).Raw(s.sgd_options.bytes()).U32(70000).U8(0);
    add("huge parameter count", s,
        "parameter count of optimizer group 0 at offset 90 is 70000");
  }
  {
    OneParamSections s;
    s.optimizer =
        Payload().U8(1).U32(1).Raw(s.sgd_options.bytes()).U32(1).U8(2);
    add("has-state 2", s,
        "has-state byte of optimizer group 0 parameter 0 at offset 94 is 2, "
        "not 0 or 1");
  }
  {
    OneParamSections s;
    s.sgd_options = Payload().F64(0.1).F64(0.9).F64(0).F64(0).U8(5);
    s.optimizer =
        Payload().U8(1).U32(1).Raw(s.sgd_options.bytes()).U32(1).U8(0);
    add("nesterov 5", s, "is 5, not 0 or 1");
  }
  {
    OneParamSections s;
    s.optimizer = Payload()
                      .U8(2)
                      .U32(1)
                      .F64(1)
                      .F64(2)  // rho
                      .F64(1e-6)
                      .F64(0)
                      .U8(0)
                      .U32(1)
                      .U8(0);
    add("Adadelta rho 2", s,
        "optimizer group 0: Adadelta: invalid rho 2 (must be in [0, 1])");
  }
  {
    OneParamSections s;
    s.optimizer = Payload()
                      .U8(2)
                      .U32(1)
                      .F64(1)
                      .F64(0.9)
                      .F64(1e-6)
                      .F64(0)
                      .U8(0)
                      .U32(1)
                      .U8(1)
                      .I64(-1)
                      .Raw(s.w_tensor.bytes())
                      .Raw(s.w_tensor.bytes());
    add("Adadelta step -1", s,
        "step of optimizer group 0 parameter 0 at offset 95 is -1");
  }
  {
    OneParamSections s;
    s.state = Payload().Raw(s.state.bytes().substr(0, 30));
    add("state cut short", s, "sampler state needs");
  }
  {
    OneParamSections s;
    s.state = Payload().I64(1).Str("dtrain.DistributedSampler v1 epoch=\x01");
    add("sampler state not text", s,
        "the sampler state at offset 115 is not printable text: "
        "\"dtrain.DistributedSampler v1 epoch=\\x01\"");
  }
  {
    OneParamSections s;
    s.state = Payload()
                  .I64(1)
                  .Str("nonsense")
                  .I64(0)
                  .F64(0)
                  .Str("")
                  .Str("")
                  .U64(0)
                  .Str("");
    add("sampler state unparsable", s, "not a DistributedSampler state");
  }
  {
    OneParamSections s;
    s.state.U8(0);
    add("a byte left in STAT", s, "the end of section STAT");
  }
  {
    const OneParamSections s;
    cases.push_back({"sections out of order",
                     Payload()
                         .Section("OPTM", s.optimizer)
                         .Section("MODL", s.model)
                         .Section("STAT", s.state)
                         .bytes(),
                     "expected section MODL at offset 0, found \"OPTM\""});
    cases.push_back({"a section longer than the payload",
                     Payload()
                         .Raw("MODL")
                         .U64(0xffffffffffffffffu)
                         .Raw(s.model.bytes())
                         .bytes(),
                     "section MODL needs 18446744073709551615 bytes at offset "
                     "12, 28 left"});
    cases.push_back({"a section missing",
                     Payload()
                         .Section("MODL", s.model)
                         .Section("OPTM", s.optimizer)
                         .bytes(),
                     "section STAT needs 4 bytes at offset"});
    cases.push_back({"bytes after the last section", s.Bytes() + "STAT",
                     "4 unexpected bytes at offset"});
    cases.push_back(
        {"empty", "", "section MODL needs 4 bytes at offset 0, 0 left"});
  }

  // The unchanged sections decode, so each case fails for its own field.
  {
    OneParam model;
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
    const std::string payload = OneParamSections().Bytes();
    absl::StatusOr<TrainingState> decoded =
        DecodeCheckpoint(MakeHeader(2, payload) + payload, *model, sgd);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, SomeState("one", "sgd"));
  }
  OneParam model;
  model->w.data().fill_(7);
  torch::optim::SGD sgd(model->parameters(),
                        torch::optim::SGDOptions(0.1).momentum(0.9));
  model->w.mutable_grad() = torch::ones({2});
  sgd.step();
  const std::vector<torch::Tensor> before = Snapshot(*model);
  const std::vector<torch::Tensor> momentum = MomentumSnapshot(sgd, *model);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string bytes = MakeHeader(2, c.payload) + c.payload;
    absl::StatusOr<TrainingState> decoded =
        DecodeCheckpoint(bytes, *model, sgd);
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kDataLoss)
        << decoded.status();
    EXPECT_THAT(std::string(decoded.status().message()),
                HasSubstr("malformed checkpoint payload: "));
    EXPECT_THAT(std::string(decoded.status().message()), HasSubstr(c.message));
    ExpectUnchanged(before, *model);
    ExpectSameMomentum(momentum, sgd, *model);
  }
}

// --- CheckpointDir
// ------------------------------------------------------------

TEST(CheckpointDirTest, OpenCreatesParentsAndRejectsBadArguments) {
  const std::string root = MakeTempDir();
  const std::string nested = absl::StrCat(root, "/a/b/c/");
  absl::StatusOr<CheckpointDir> dir = CheckpointDir::Open(nested, 3);
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_EQ(dir->path(), absl::StrCat(root, "/a/b/c"));
  EXPECT_EQ(dir->keep(), 3);
  EXPECT_TRUE(Exists(dir->path()));
  EXPECT_THAT(dir->List(), IsEmpty());
  // Opening again is fine.
  EXPECT_TRUE(CheckpointDir::Open(nested).ok());

  EXPECT_EQ(CheckpointDir::Open("").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckpointDir::Open(root, 0).status().code(),
            absl::StatusCode::kInvalidArgument);

  const std::string file = absl::StrCat(root, "/file");
  WriteRaw(file, "x");
  absl::StatusOr<CheckpointDir> on_file = CheckpointDir::Open(file);
  EXPECT_FALSE(on_file.ok());
  EXPECT_THAT(std::string(on_file.status().message()), HasSubstr(file));
  absl::StatusOr<CheckpointDir> under_file =
      CheckpointDir::Open(absl::StrCat(file, "/sub"));
  EXPECT_FALSE(under_file.ok());
  EXPECT_THAT(std::string(under_file.status().message()),
              HasSubstr(absl::StrCat(file, "/sub")));
}

TEST(CheckpointDirTest, SaveWritesAtomicallyAndRotates) {
  const std::string root = MakeTempDir();
  absl::StatusOr<CheckpointDir> dir = CheckpointDir::Open(root, 2);
  ASSERT_TRUE(dir.ok()) << dir.status();
  for (int64_t step : {100, 200, 300}) {
    absl::StatusOr<std::string> path =
        dir->Save(step, absl::StrCat("bytes of ", step));
    ASSERT_TRUE(path.ok()) << path.status();
    EXPECT_EQ(*path, absl::StrCat(root, "/checkpoint-000000", step, ".dtc"));
    EXPECT_EQ(*base::ReadFile(*path), absl::StrCat("bytes of ", step));
  }
  EXPECT_THAT(dir->List(),
              ElementsAre(absl::StrCat(root, "/checkpoint-000000200.dtc"),
                          absl::StrCat(root, "/checkpoint-000000300.dtc")));
  // Overwriting a step replaces its content; no temporary stays behind.
  ASSERT_TRUE(dir->Save(300, "new bytes").ok());
  EXPECT_EQ(*base::ReadFile(absl::StrCat(root, "/checkpoint-000000300.dtc")),
            "new bytes");
  EXPECT_THAT(FilesIn(root), ElementsAre("checkpoint-000000200.dtc",
                                         "checkpoint-000000300.dtc"));

  // best.dtc is not a checkpoint of the rotation.
  absl::StatusOr<std::string> best = dir->SaveBest("best bytes");
  ASSERT_TRUE(best.ok()) << best.status();
  EXPECT_EQ(*best, absl::StrCat(root, "/best.dtc"));
  EXPECT_EQ(*base::ReadFile(*best), "best bytes");
  ASSERT_TRUE(dir->Save(400, "400").ok());
  EXPECT_THAT(FilesIn(root), ElementsAre("best.dtc", "checkpoint-000000300.dtc",
                                         "checkpoint-000000400.dtc"));

  // Steps of more than nine digits sort by value.
  ASSERT_TRUE(dir->Save(1234567890, "big").ok());
  EXPECT_THAT(dir->List(),
              ElementsAre(absl::StrCat(root, "/checkpoint-000000400.dtc"),
                          absl::StrCat(root, "/checkpoint-1234567890.dtc")));
  EXPECT_EQ(dir->Save(-1, "x").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CheckpointDirTest, KeepOneLeavesOnlyTheNewest) {
  const std::string root = MakeTempDir();
  absl::StatusOr<CheckpointDir> dir = CheckpointDir::Open(root, 1);
  ASSERT_TRUE(dir.ok());
  ASSERT_TRUE(dir->Save(1, "a").ok());
  ASSERT_TRUE(dir->Save(2, "b").ok());
  EXPECT_THAT(dir->List(),
              ElementsAre(absl::StrCat(root, "/checkpoint-000000002.dtc")));
}

TEST(CheckpointDirTest, SaveDeletesCheckpointsOfAnAbandonedLongerRun) {
  const std::string root = MakeTempDir();
  absl::StatusOr<CheckpointDir> dir = CheckpointDir::Open(root, 2);
  ASSERT_TRUE(dir.ok());
  ASSERT_TRUE(dir->Save(100, "100").ok());
  ASSERT_TRUE(dir->Save(300, "300").ok());
  // Resumed from step 100; the file written is kept even though 300 is newer.
  ASSERT_TRUE(dir->Save(200, "200").ok());
  EXPECT_THAT(dir->List(),
              ElementsAre(absl::StrCat(root, "/checkpoint-000000100.dtc"),
                          absl::StrCat(root, "/checkpoint-000000200.dtc")));
}

TEST(CheckpointDirTest, SaveDeletesStrayTemporariesOnly) {
  const std::string root = MakeTempDir();
  absl::StatusOr<CheckpointDir> dir = CheckpointDir::Open(root, 2);
  ASSERT_TRUE(dir.ok());
  WriteRaw(absl::StrCat(root, "/.checkpoint-000000100.dtc.123.0.tmp"), "part");
  WriteRaw(absl::StrCat(root, "/.best.dtc.123.1.tmp"), "part");
  WriteRaw(absl::StrCat(root, "/.someone-else.tmp"), "keep me");
  WriteRaw(absl::StrCat(root, "/notes.txt"), "keep me");
  ASSERT_TRUE(dir->Save(100, "100").ok());
  EXPECT_THAT(FilesIn(root),
              ElementsAre(".someone-else.tmp", "checkpoint-000000100.dtc",
                          "notes.txt"));
  EXPECT_EQ(*base::ReadFile(absl::StrCat(root, "/checkpoint-000000100.dtc")),
            "100");
}

TEST(CheckpointDirTest, FailedWriteNamesThePathAndLeavesNoTemporary) {
  const std::string root = MakeTempDir();
  absl::StatusOr<CheckpointDir> dir = CheckpointDir::Open(root, 2);
  ASSERT_TRUE(dir.ok());
  ASSERT_TRUE(dir->Save(100, "100").ok());
  // A directory where the file should go: the rename fails (even for root).
  const std::string blocked = absl::StrCat(root, "/checkpoint-000000200.dtc");
  ASSERT_EQ(::mkdir(blocked.c_str(), 0755), 0);
  absl::StatusOr<std::string> saved = dir->Save(200, "200");
  EXPECT_FALSE(saved.ok());
  EXPECT_THAT(std::string(saved.status().message()), HasSubstr(blocked));
  EXPECT_THAT(FilesIn(root), ElementsAre("checkpoint-000000100.dtc",
                                         "checkpoint-000000200.dtc"));
  EXPECT_EQ(*base::ReadFile(absl::StrCat(root, "/checkpoint-000000100.dtc")),
            "100");
}

TEST(CheckpointDirTest, UnwritableDirectoryNamesThePath) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes to read-only directories";
  const std::string root = MakeTempDir();
  absl::StatusOr<CheckpointDir> dir = CheckpointDir::Open(root, 2);
  ASSERT_TRUE(dir.ok());
  ASSERT_EQ(::chmod(root.c_str(), 0555), 0);
  absl::StatusOr<std::string> saved = dir->Save(100, "100");
  ::chmod(root.c_str(), 0755);
  EXPECT_EQ(saved.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(saved.status().message()),
              HasSubstr(absl::StrCat(root, "/checkpoint-000000100.dtc")));
  EXPECT_THAT(FilesIn(root), IsEmpty());
}

TEST(CheckpointDirTest, LatestSkipsInvalidNewerFiles) {
  const std::string root = MakeTempDir();
  absl::StatusOr<CheckpointDir> dir = CheckpointDir::Open(root, 3);
  ASSERT_TRUE(dir.ok());
  absl::StatusOr<CheckpointDir::Found> none = dir->Latest();
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(none.status().message()), HasSubstr(root));

  const std::string good = TinyCheckpoint(1);
  ASSERT_TRUE(dir->Save(100, good).ok());
  const std::string newer = TinyCheckpoint(2);
  ASSERT_TRUE(dir->Save(200, newer).ok());
  absl::StatusOr<CheckpointDir::Found> latest = dir->Latest();
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->path, absl::StrCat(root, "/checkpoint-000000200.dtc"));
  EXPECT_EQ(latest->bytes, newer);
  EXPECT_THAT(latest->skipped, IsEmpty());

  // The newest is cut short (as by a copy that ran out of disk).
  ASSERT_TRUE(dir->Save(300, good.substr(0, good.size() - 10)).ok());
  latest = dir->Latest();
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->path, absl::StrCat(root, "/checkpoint-000000200.dtc"));
  EXPECT_EQ(latest->bytes, newer);
  ASSERT_THAT(latest->skipped, SizeIs(1));
  EXPECT_THAT(latest->skipped[0],
              HasSubstr(absl::StrCat(root,
                                     "/checkpoint-000000300.dtc: "
                                     "truncated: header says")));

  // All invalid: every file and its reason.
  std::string flipped = newer;
  flipped[kCheckpointHeaderSize + 5] ^= 1;
  WriteRaw(absl::StrCat(root, "/checkpoint-000000200.dtc"), flipped);
  WriteRaw(absl::StrCat(root, "/checkpoint-000000100.dtc"), "");
  latest = dir->Latest();
  EXPECT_EQ(latest.status().code(), absl::StatusCode::kDataLoss);
  const std::string message(latest.status().message());
  EXPECT_THAT(message,
              HasSubstr(absl::StrCat("no valid checkpoint in ", root)));
  EXPECT_THAT(message, HasSubstr("checkpoint-000000300.dtc: truncated"));
  EXPECT_THAT(message,
              HasSubstr("checkpoint-000000200.dtc: checksum mismatch"));
  EXPECT_THAT(message,
              HasSubstr("checkpoint-000000100.dtc: truncated: 0 bytes"));
}

TEST(CheckpointDirTest, CheckpointFromLatestDecodes) {
  const std::string root = MakeTempDir();
  absl::StatusOr<CheckpointDir> dir = CheckpointDir::Open(root);
  ASSERT_TRUE(dir.ok());
  ASSERT_TRUE(dir->Save(100, TinyCheckpoint(1)).ok());
  absl::StatusOr<CheckpointDir::Found> latest = dir->Latest();
  ASSERT_TRUE(latest.ok()) << latest.status();
  torch::manual_seed(9);
  Tiny model;
  torch::optim::SGD sgd(model->parameters(),
                        torch::optim::SGDOptions(0.1).momentum(0.9));
  absl::StatusOr<TrainingState> state =
      DecodeCheckpoint(latest->bytes, *model, sgd, "tiny", "sgd");
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(*state, SomeState("tiny", "sgd"));
}

}  // namespace
}  // namespace dtrain::trainer
