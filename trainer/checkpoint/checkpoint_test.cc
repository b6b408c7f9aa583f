// The checkpoint format: its header, round trips (the hook's state too), and
// checkpoints that do not fit the model. Damaged bytes:
// checkpoint_damage_test.cc; the payload field by field:
// checkpoint_payload_test.cc; optimizer state: optimizer_codec_test.cc.
#include "trainer/checkpoint/checkpoint.h"

#include <torch/nn/module.h>
#include <torch/optim/sgd.h>
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/crc32_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/model.h"
#include "models/registry.h"
#include "trainer/checkpoint/checkpoint_testing.h"

namespace dtrain::trainer {
namespace {

using ::dtrain::base::testing::BitwiseCrc32;
using ::dtrain::trainer::testing::BitwiseEqual;
using ::dtrain::trainer::testing::ExpectDecodeRejected;
using ::dtrain::trainer::testing::ExpectSameHookState;
using ::dtrain::trainer::testing::ExpectSameTensors;
using ::dtrain::trainer::testing::MomentumOf;
using ::dtrain::trainer::testing::SomeHookState;
using ::dtrain::trainer::testing::SomeState;
using ::dtrain::trainer::testing::StatusIs;
using ::dtrain::trainer::testing::Tiny;
using ::dtrain::trainer::testing::TinyCheckpoint;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

uint64_t ReadLittleEndian(absl::string_view bytes, size_t offset, int size) {
  uint64_t value = 0;
  for (int i = 0; i < size; ++i) {
    value |= uint64_t{static_cast<unsigned char>(bytes[offset + i])} << (8 * i);
  }
  return value;
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

// --- Encoding and decoding ------------------------------------------------

TEST(CheckpointTest, HeaderIsMagicVersionLengthAndCrcLittleEndian) {
  const std::string bytes = TinyCheckpoint();
  ASSERT_GT(bytes.size(), kCheckpointHeaderSize);
  EXPECT_EQ(bytes.substr(0, 8), "DTRAINCK");
  EXPECT_EQ(ReadLittleEndian(bytes, 8, 4), 3u);
  const absl::string_view payload =
      absl::string_view(bytes).substr(kCheckpointHeaderSize);
  EXPECT_EQ(ReadLittleEndian(bytes, 12, 8), payload.size());
  EXPECT_EQ(ReadLittleEndian(bytes, 20, 4), BitwiseCrc32(payload));
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

// The hook's state: any name, tensors of any dtype and shape of the format,
// bit for bit and in order, on the CPU.
TEST(CheckpointTest, HookStateRoundTrips) {
  torch::manual_seed(1);
  Tiny model;
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  HookState hook = SomeHookState();
  hook.tensors.emplace_back("error.0", torch::randn({3, 4}).t());
  hook.tensors.emplace_back("bf16", torch::randn({5}).to(torch::kBFloat16));
  hook.tensors.emplace_back("mask", torch::tensor({true, false, true}));
  hook.tensors.emplace_back("empty", torch::zeros({0, 2}, torch::kDouble));
  ASSERT_FALSE(hook.tensors[2].second.is_contiguous());
  absl::StatusOr<std::string> bytes =
      EncodeCheckpoint(*model, sgd, SomeState("tiny", "sgd"), hook);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_TRUE(ValidateCheckpointBytes(*bytes).ok());

  Tiny restored;
  torch::optim::SGD restored_sgd(restored->parameters(),
                                 torch::optim::SGDOptions(0.1));
  HookState decoded_hook;
  absl::StatusOr<TrainingState> decoded = DecodeCheckpoint(
      *bytes, *restored, restored_sgd, "tiny", "sgd", &decoded_hook);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, SomeState("tiny", "sgd"));
  ExpectSameHookState(decoded_hook, hook);
  for (const auto& [name, tensor] : decoded_hook.tensors) {
    EXPECT_TRUE(tensor.device().is_cpu()) << name;
  }

  // Without a hook: an empty name and no entries.
  bytes = EncodeCheckpoint(*model, sgd, SomeState("tiny", "sgd"));
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  decoded = DecodeCheckpoint(*bytes, *restored, restored_sgd, "tiny", "sgd",
                             &decoded_hook);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded_hook.name, "");
  EXPECT_THAT(decoded_hook.tensors, IsEmpty());

  // A failed decode leaves `hook` alone.
  torch::manual_seed(2);
  Tiny other(4, 8, /*extra=*/true);
  torch::optim::SGD other_sgd(other->parameters(),
                              torch::optim::SGDOptions(0.1));
  decoded_hook = SomeHookState();
  EXPECT_FALSE(DecodeCheckpoint(TinyCheckpoint(), *other, other_sgd, "tiny",
                                "sgd", &decoded_hook)
                   .ok());
  ExpectSameHookState(decoded_hook, SomeHookState());
}

TEST(CheckpointTest, HookStateAReaderWouldRefuseIsNotWritten) {
  torch::manual_seed(1);
  Tiny model;
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  struct Case {
    HookState hook;
    std::string message;
  };
  const torch::Tensor one = torch::ones({1});
  const std::vector<Case> cases = {
      {{"", {{"a", one}}, {}},
       "communication hook state of 1 entries without the hook's name"},
      {{"", {}, {{{"e", one}}}},
       "communication hook state of 1 entries without the hook's name"},
      {{std::string(1025, 'h'), {}, {}},
       "the communication hook's name has 1025 bytes, more than 1024"},
      {{"h", {{"", one}}, {}},
       "entry 0 of the communication hook's state has no name"},
      {{"h", {{std::string(1025, 'e'), one}}, {}},
       "the name of entry 0 of the communication hook's state has 1025 bytes"},
      {{"h", {{"a", one}, {"a", one}}, {}},
       "the communication hook's state has \"a\" twice"},
      {{"h", {{"a", torch::Tensor()}}, {}},
       "the communication hook's state \"a\" is an undefined tensor"},
      {{"h", {{"c", torch::ones({2}, torch::kComplexFloat)}}, {}},
       "communication hook state \"c\" has dtype ComplexFloat"},
      {{"h", {{"rank0/e", one}}, {}},
       "entry 0 of the communication hook's state \"rank0/e\" has a '/'"},
      {{"h", {}, {{{"e", one}}, {{"f", one}}}},
       "entry 0 of rank 1's communication hook state is \"f\", rank 0's is "
       "\"e\""},
      {{"h", {}, {{{"e", one}}, {}}},
       "rank 1's per-rank communication hook state has 0 entries, rank 0's 1"},
      {{"h", {}, {{{"e", one}, {"e", one}}}},
       "the per-rank communication hook state has \"e\" twice"},
      {{"h", {}, {{{std::string(1019, 'e'), one}}}},
       "the name of entry 0 of rank 0's communication hook state has 1025 "
       "bytes"},
      {{"h", {}, {{{"e", one}}, {{"e", torch::Tensor()}}}},
       "rank 1's communication hook state \"e\" is an undefined tensor"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    EXPECT_THAT(EncodeCheckpoint(*model, sgd, SomeState("tiny", "sgd"), c.hook)
                    .status(),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr(absl::StrCat("cannot encode checkpoint: ",
                                                c.message))));
  }
}

// --- Checkpoints that do not fit --------------------------------------------

struct Target {
  std::shared_ptr<models::Model> model;
  std::unique_ptr<torch::optim::SGD> sgd;
};

Target MakeTarget(const models::ModelConfig& config) {
  Target target;
  target.model = MakeConvNet(5, config);
  target.sgd = std::make_unique<torch::optim::SGD>(
      target.model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
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
  // fc1 takes 32 * 12 * 12 features for 28x28 images, 32 * 14 * 14 for 32.
  ExpectDecodeRejected(
      ConvNetCheckpoint({}), *target.model, *target.sgd,
      StatusIs(absl::StatusCode::kFailedPrecondition,
               HasSubstr("parameter fc1.weight has shape [64, 4608] in the "
                         "checkpoint, [64, 6272] in the model")));
  EXPECT_THAT(target.sgd->state(), IsEmpty());
}

TEST(CheckpointTest, NumClassesMismatchNamesTheFirstDifferentParameter) {
  models::ModelConfig five_classes;
  five_classes.num_classes = 5;
  Target target = MakeTarget(five_classes);
  ExpectDecodeRejected(
      ConvNetCheckpoint({}), *target.model, *target.sgd,
      StatusIs(absl::StatusCode::kFailedPrecondition,
               HasSubstr("parameter fc2.weight has shape [10, 64] in the "
                         "checkpoint, [5, 64] in the model")));
}

TEST(CheckpointTest, MissingUnexpectedAndDtypeMismatchesAreNamed) {
  const std::string bytes = TinyCheckpoint();
  {
    torch::manual_seed(3);
    Tiny bigger(4, 8, /*extra=*/true);
    torch::optim::SGD sgd(bigger->parameters(), torch::optim::SGDOptions(0.1));
    ExpectDecodeRejected(
        bytes, *bigger, sgd,
        StatusIs(absl::StatusCode::kFailedPrecondition,
                 HasSubstr("it has no parameter tail.weight (model shape "
                           "[3, 3])")));
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
    ExpectDecodeRejected(
        *big_bytes, *smaller, smaller_sgd,
        StatusIs(absl::StatusCode::kFailedPrecondition,
                 HasSubstr("it has parameter tail.weight, which the model "
                           "does not")));
  }
  {
    Tiny double_model;
    double_model->to(torch::kDouble);
    torch::optim::SGD sgd(double_model->parameters(),
                          torch::optim::SGDOptions(0.1));
    ExpectDecodeRejected(
        bytes, *double_model, sgd,
        StatusIs(absl::StatusCode::kFailedPrecondition,
                 HasSubstr("parameter fc.weight has dtype Float in the "
                           "checkpoint, Double in the model")));
  }
}

TEST(CheckpointTest, ModelAndOptimizerNamesAreChecked) {
  const std::string bytes = ConvNetCheckpoint({});
  Target target = MakeTarget({});
  ExpectDecodeRejected(bytes, *target.model, *target.sgd,
                       StatusIs(absl::StatusCode::kFailedPrecondition,
                                HasSubstr("the checkpoint is of model "
                                          "\"convnet\", not \"resnet18\"")),
                       "resnet18", "sgd");
  ExpectDecodeRejected(
      bytes, *target.model, *target.sgd,
      StatusIs(absl::StatusCode::kFailedPrecondition,
               HasSubstr("optimizer \"sgd\", not \"adadelta\"")),
      "convnet", "adadelta");
  EXPECT_THAT(target.sgd->state(), IsEmpty());

  absl::StatusOr<TrainingState> decoded =
      DecodeCheckpoint(bytes, *target.model, *target.sgd, "convnet", "sgd");
  EXPECT_TRUE(decoded.ok()) << decoded.status();
}

}  // namespace
}  // namespace dtrain::trainer
