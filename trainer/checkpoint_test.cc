#include "trainer/checkpoint.h"

#include <c10/util/string_utils.h>
#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/archive.h>
#include <torch/types.h>
#include <torch/utils.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
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
#include "data/distributed_sampler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/adadelta.h"
#include "models/model.h"
#include "models/registry.h"
#include "trainer/atomic_file.h"

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
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
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

std::string StateKey(const torch::Tensor& param) {
  return c10::guts::to_string(param.unsafeGetTensorImpl());
}

const torch::Tensor* MomentumOf(torch::optim::SGD& sgd,
                                const torch::Tensor& param) {
  auto it = sgd.state().find(StateKey(param));
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
  EXPECT_EQ(ReadLittleEndian(bytes, 8, 4), 1u);
  const absl::string_view payload =
      absl::string_view(bytes).substr(kCheckpointHeaderSize);
  EXPECT_EQ(ReadLittleEndian(bytes, 12, 8), payload.size());
  EXPECT_EQ(ReadLittleEndian(bytes, 20, 4), ReferenceCrc32(payload));
  // The payload is a LibTorch (zip) archive.
  EXPECT_EQ(payload.substr(0, 2), "PK");
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
  models::Adadelta adadelta(model->parameters(),
                            models::AdadeltaOptions().lr(0.5).rho(0.8));
  TinyStep(model, adadelta, 10);
  TinyStep(model, adadelta, 11);
  ASSERT_EQ(model->bn->num_batches_tracked.item<int64_t>(), 2);
  const TrainingState state = SomeState("tiny", "adadelta");
  absl::StatusOr<std::string> bytes = EncodeCheckpoint(*model, adadelta, state);
  ASSERT_TRUE(bytes.ok()) << bytes.status();

  torch::manual_seed(2);
  Tiny restored;
  models::Adadelta restored_adadelta(restored->parameters());
  absl::StatusOr<TrainingState> decoded =
      DecodeCheckpoint(*bytes, *restored, restored_adadelta);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, state);
  ExpectSameTensors(*model, *restored);

  const std::vector<torch::Tensor> params = model->parameters();
  const std::vector<torch::Tensor> restored_params = restored->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    const models::AdadeltaParamState* a = adadelta.StateOf(params[i]);
    const models::AdadeltaParamState* b =
        restored_adadelta.StateOf(restored_params[i]);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(a->step(), b->step());
    EXPECT_TRUE(BitwiseEqual(a->square_avg(), b->square_avg())) << i;
    EXPECT_TRUE(BitwiseEqual(a->acc_delta(), b->acc_delta())) << i;
  }
  // Adadelta restores its options too (models/adadelta.h).
  EXPECT_EQ(restored_adadelta.param_groups()[0].options().get_lr(), 0.5);

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
  std::string version2 = good;
  version2[8] = 2;
  out.push_back({"version 2", version2, absl::StatusCode::kInvalidArgument,
                 "unsupported checkpoint format version 2"});

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

TEST(CheckpointTest, ValidHeaderWithForeignPayloadIsDataLoss) {
  const std::string payload = "not a zip archive";
  torch::manual_seed(1);
  Tiny model;
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  const std::vector<torch::Tensor> before = Snapshot(*model);
  const std::string bytes = MakeHeader(1, payload) + payload;
  EXPECT_TRUE(ValidateCheckpointBytes(bytes).ok());
  absl::StatusOr<TrainingState> decoded = DecodeCheckpoint(bytes, *model, sgd);
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(decoded.status().message()),
              HasSubstr("malformed checkpoint payload"));
  ExpectUnchanged(before, *model);

  // A LibTorch archive, but not one EncodeCheckpoint wrote.
  torch::serialize::OutputArchive archive;
  archive.write("weight", torch::ones({3}));
  std::ostringstream stream;
  archive.save_to(stream);
  const std::string archive_bytes = MakeHeader(1, stream.str()) + stream.str();
  decoded = DecodeCheckpoint(archive_bytes, *model, sgd);
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(decoded.status().message()),
              HasSubstr("no training_state"));
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
    // Another optimizer type: LibTorch's load throws.
    torch::manual_seed(3);
    Tiny model;
    models::Adadelta adadelta(model->parameters());
    TinyStep(model, adadelta, 4);
    const std::vector<torch::Tensor> before = Snapshot(*model);
    absl::StatusOr<TrainingState> decoded =
        DecodeCheckpoint(bytes, *model, adadelta);
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(decoded.status().message()),
                HasSubstr("optimizer state does not fit"));
    ExpectUnchanged(before, *model);
    for (const torch::Tensor& param : model->parameters()) {
      EXPECT_NE(adadelta.StateOf(param), nullptr);
    }
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
    ExpectUnchanged(before, *model);
    EXPECT_THAT(sgd.state(), SizeIs(2));
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
    EXPECT_EQ(*ReadFile(*path), absl::StrCat("bytes of ", step));
  }
  EXPECT_THAT(dir->List(),
              ElementsAre(absl::StrCat(root, "/checkpoint-000000200.dtc"),
                          absl::StrCat(root, "/checkpoint-000000300.dtc")));
  // Overwriting a step replaces its content; no temporary stays behind.
  ASSERT_TRUE(dir->Save(300, "new bytes").ok());
  EXPECT_EQ(*ReadFile(absl::StrCat(root, "/checkpoint-000000300.dtc")),
            "new bytes");
  EXPECT_THAT(FilesIn(root), ElementsAre("checkpoint-000000200.dtc",
                                         "checkpoint-000000300.dtc"));

  // best.dtc is not a checkpoint of the rotation.
  absl::StatusOr<std::string> best = dir->SaveBest("best bytes");
  ASSERT_TRUE(best.ok()) << best.status();
  EXPECT_EQ(*best, absl::StrCat(root, "/best.dtc"));
  EXPECT_EQ(*ReadFile(*best), "best bytes");
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
  EXPECT_EQ(*ReadFile(absl::StrCat(root, "/checkpoint-000000100.dtc")), "100");
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
  EXPECT_EQ(*ReadFile(absl::StrCat(root, "/checkpoint-000000100.dtc")), "100");
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
