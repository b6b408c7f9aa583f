// The checkpoint payload field by field: what EncodeCheckpoint writes is the
// format docs/FORMATS.md describes, a version 2 payload still reads, and
// hand-made payloads behind valid headers, each with one field that lies,
// are rejected naming the field.
#include <torch/nn/module.h>
#include <torch/optim/sgd.h>
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <utility>
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
using ::dtrain::trainer::testing::MakeHeader;
using ::dtrain::trainer::testing::Payload;
using ::dtrain::trainer::testing::SomeState;
using ::dtrain::trainer::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::SizeIs;

// A model with one float32 parameter "w" of shape [2].
struct OneParamImpl : torch::nn::Module {
  OneParamImpl() { w = register_parameter("w", torch::tensor({1.5f, -2.0f})); }
  torch::Tensor w;
};
TORCH_MODULE(OneParam);

// The sections of a OneParam checkpoint with SGD (lr 0.1, momentum 0.9, no
// state), SomeState("one", "sgd") and no hook, with the parts the tests
// replace.
struct OneParamSections {
  Payload w_tensor = Payload().U8(1).U8(1).I64(2).Floats({1.5f, -2.0f});
  Payload model = Payload().U32(1).Str("w").U8(0).Raw(w_tensor.bytes());
  Payload sgd_options = Payload().F64(0.1).F64(0.9).F64(0).F64(0).U8(0);
  Payload optimizer =
      Payload().U8(1).U32(1).Raw(sgd_options.bytes()).U32(1).U8(0);
  Payload state = StateSection(SomeState("one", "sgd"));
  // No name, no entries.
  Payload hook = Payload().Str("").U32(0);

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
  // Version 2: without HOOK.
  std::string V2Bytes() const {
    return Payload()
        .Section("MODL", model)
        .Section("OPTM", optimizer)
        .Section("STAT", state)
        .bytes();
  }
  std::string Bytes() const {
    return V2Bytes() + Payload().Section("HOOK", hook).bytes();
  }
  // The offset of the HOOK section's body in Bytes().
  size_t HookOffset() const { return V2Bytes().size() + 4 + 8; }
};
TEST(CheckpointTest, PayloadIsTheDocumentedFormat) {
  OneParam model;
  torch::optim::SGD sgd(model->parameters(),
                        torch::optim::SGDOptions(0.1).momentum(0.9));
  absl::StatusOr<std::string> bytes =
      EncodeCheckpoint(*model, sgd, SomeState("one", "sgd"));
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  const std::string payload = OneParamSections().Bytes();
  EXPECT_EQ(*bytes, MakeHeader(3, payload) + payload);

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
  EXPECT_EQ(*bytes, MakeHeader(3, stepped.Bytes()) + stepped.Bytes());
}

TEST(CheckpointTest, HookSectionIsTheDocumentedFormat) {
  OneParam model;
  torch::optim::SGD sgd(model->parameters(),
                        torch::optim::SGDOptions(0.1).momentum(0.9));
  HookState hook;
  hook.name = "local_sgd";
  hook.tensors.emplace_back("local_sgd.steps",
                            torch::scalar_tensor(7, torch::kLong));
  hook.tensors.emplace_back("q", torch::tensor({0.5f, -1.0f}));
  absl::StatusOr<std::string> bytes =
      EncodeCheckpoint(*model, sgd, SomeState("one", "sgd"), hook);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  OneParamSections expected;
  expected.hook = Payload()
                      .Str("local_sgd")
                      .U32(2)
                      .Str("local_sgd.steps")
                      .U8(5)  // int64
                      .U8(0)  // a scalar
                      .I64(7)
                      .Str("q")
                      .U8(1)
                      .U8(1)
                      .I64(2)
                      .Floats({0.5f, -1.0f});
  EXPECT_EQ(*bytes, MakeHeader(3, expected.Bytes()) + expected.Bytes());
}

// Per-rank state: after the shared entries, rank 0's entries then rank 1's,
// each named rank<r>/<name>, in one count; it reads back as written.
TEST(CheckpointTest, PerRankHookEntriesAreTheDocumentedFormat) {
  OneParam model;
  torch::optim::SGD sgd(model->parameters(),
                        torch::optim::SGDOptions(0.1).momentum(0.9));
  HookState hook;
  hook.name = "powersgd";
  hook.tensors.emplace_back("it", torch::scalar_tensor(7, torch::kLong));
  for (float v : {0.5f, -0.0f})
    hook.ranks.push_back({{"e", torch::tensor({v})}});
  absl::StatusOr<std::string> bytes =
      EncodeCheckpoint(*model, sgd, SomeState("one", "sgd"), hook);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  OneParamSections expected;
  expected.hook = Payload()
                      .Str("powersgd")
                      .U32(3)
                      .Str("it")
                      .U8(5)
                      .U8(0)
                      .I64(7)
                      .Str("rank0/e")
                      .U8(1)
                      .U8(1)
                      .I64(1)
                      .Floats({0.5f})
                      .Str("rank1/e")
                      .U8(1)
                      .U8(1)
                      .I64(1)
                      .Floats({-0.0f});
  EXPECT_EQ(*bytes, MakeHeader(3, expected.Bytes()) + expected.Bytes());

  HookState decoded;
  OneParam restored;
  torch::optim::SGD restored_sgd(restored->parameters(),
                                 torch::optim::SGDOptions(0.1).momentum(0.9));
  ASSERT_TRUE(
      DecodeCheckpoint(*bytes, *restored, restored_sgd, "one", "sgd", &decoded)
          .ok());
  testing::ExpectSameHookState(decoded, hook);
}

// A version 2 file (written here from the documented layout: three
// sections, no HOOK) still loads, with an empty hook state.
TEST(CheckpointTest, Version2ReadsWithoutHookState) {
  const std::string payload = OneParamSections().V2Bytes();
  const std::string bytes = MakeHeader(2, payload) + payload;
  EXPECT_TRUE(ValidateCheckpointBytes(bytes).ok());
  OneParam model;
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  HookState hook;
  hook.name = "left over";
  hook.tensors.emplace_back("x", torch::ones({1}));
  absl::StatusOr<TrainingState> decoded =
      DecodeCheckpoint(bytes, *model, sgd, "one", "sgd", &hook);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, SomeState("one", "sgd"));
  EXPECT_EQ(hook.name, "");
  EXPECT_THAT(hook.tensors, SizeIs(0));

  // Version 3 requires the HOOK section; version 2 allows nothing after
  // STAT.
  ExpectDecodeRejected(
      MakeHeader(3, payload) + payload, *model, sgd,
      StatusIs(absl::StatusCode::kDataLoss,
               HasSubstr(absl::StrCat("section HOOK needs 4 bytes at offset ",
                                      payload.size(), ", 0 left"))));
  const std::string v3 = OneParamSections().Bytes();
  ExpectDecodeRejected(
      MakeHeader(2, v3) + v3, *model, sgd,
      StatusIs(
          absl::StatusCode::kDataLoss,
          HasSubstr(absl::StrCat("20 unexpected bytes at offset ",
                                 payload.size(), ", the end of the payload"))));
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
  auto with_optimizer = [](const Payload& optimizer) {
    OneParamSections s;
    s.optimizer = optimizer;
    return s;
  };
  // Kind 1 (SGD), the group count, one group: its options, its parameter
  // count and one has-state byte.
  auto sgd_section = [](uint32_t groups, uint32_t params, uint8_t has_state,
                        const Payload& options =
                            OneParamSections().sgd_options) {
    return Payload()
        .U8(1)
        .U32(groups)
        .Raw(options.bytes())
        .U32(params)
        .U8(has_state);
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
  add("unknown optimizer kind", with_optimizer(Payload().U8(5).U32(0)),
      "unknown optimizer kind 5 at offset 52");
  add("huge group count", with_optimizer(sgd_section(1000, 1, 0)),
      "optimizer group count at offset 53 is 1000, but the 38 bytes left "
      "hold at most 1");
  add("huge parameter count", with_optimizer(sgd_section(1, 70000, 0)),
      "parameter count of optimizer group 0 at offset 90 is 70000");
  add("has-state 2", with_optimizer(sgd_section(1, 1, 2)),
      "has-state byte of optimizer group 0 parameter 0 at offset 94 is 2, "
      "not 0 or 1");
  add("nesterov 5",
      with_optimizer(sgd_section(
          1, 1, 0, Payload().F64(0.1).F64(0.9).F64(0).F64(0).U8(5))),
      "is 5, not 0 or 1");
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
    // A step near 2^63 would overflow at the next optimizer step.
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
                      .I64(int64_t{1} << 62)
                      .Raw(s.w_tensor.bytes())
                      .Raw(s.w_tensor.bytes());
    add("Adadelta step 2^62", s,
        "step of optimizer group 0 parameter 0 at offset 95 is "
        "4611686018427387904, outside [0, 1099511627776]");
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
  // The HOOK section.
  const size_t hook_at = OneParamSections().HookOffset();
  auto with_hook = [](const Payload& hook) {
    OneParamSections s;
    s.hook = hook;
    return s;
  };
  add("hook name cut short", with_hook(Payload().U32(100).Raw("local_sgd")),
      absl::StrCat("communication hook name needs 100 bytes at offset ",
                   hook_at + 4, ", 9 left"));
  add("hook name of 1025 bytes",
      with_hook(Payload().Str(std::string(1025, 'h')).U32(0)),
      absl::StrCat("communication hook name at offset ", hook_at,
                   " has 1025 bytes, more than 1024"));
  add("hook count missing", with_hook(Payload().Str("h")),
      absl::StrCat("communication hook state count needs 4 bytes at offset ",
                   hook_at + 5, ", 0 left"));
  const Payload steps_tensor = Payload().U8(5).U8(0).I64(3);
  add("huge hook count",
      with_hook(
          Payload().Str("h").U32(1000).Str("s").Raw(steps_tensor.bytes())),
      absl::StrCat("communication hook state count at offset ", hook_at + 5,
                   " is 1000, but the 15 bytes left hold at most 2"));
  add("hook state without a hook name",
      with_hook(Payload().Str("").U32(1).Str("s").Raw(steps_tensor.bytes())),
      absl::StrCat("communication hook state count at offset ", hook_at + 4,
                   " is 1, but the hook has no name"));
  add("hook entry without a name",
      with_hook(Payload().Str("h").U32(1).Str("").Raw(steps_tensor.bytes())),
      absl::StrCat("name of communication hook state entry 0 at offset ",
                   hook_at + 9, " has 0 bytes (1 to 1024)"));
  add("hook entry twice",
      with_hook(Payload()
                    .Str("h")
                    .U32(2)
                    .Str("s")
                    .Raw(steps_tensor.bytes())
                    .Str("s")
                    .Raw(steps_tensor.bytes())),
      absl::StrCat("communication hook state entry 1 at offset ",
                   hook_at + 9 + 5 + 10, ": \"s\" is twice"));
  const Payload one_float = Payload().U8(1).U8(1).I64(1).Floats({1.0f});
  add("hook entry with a '/' not rank<r>/<name>",
      with_hook(Payload().Str("h").U32(1).Str("a/b").Raw(one_float.bytes())),
      absl::StrCat("communication hook state entry 0 at offset ", hook_at + 9,
                   ": \"a/b\" has a '/' but is not rank<r>/<name> with r "
                   "below 1 (the entry count)"));
  add("per-rank entry of a rank past the count",
      with_hook(
          Payload().Str("h").U32(1).Str("rank1/e").Raw(one_float.bytes())),
      "\"rank1/e\" has a '/' but is not rank<r>/<name> with r below 1");
  add("per-rank entry with a leading zero",
      with_hook(
          Payload().Str("h").U32(1).Str("rank00/e").Raw(one_float.bytes())),
      "\"rank00/e\" has a '/' but is not rank<r>/<name>");
  add("a rank without rank 0's names",
      with_hook(Payload()
                    .Str("h")
                    .U32(2)
                    .Str("rank0/e")
                    .Raw(one_float.bytes())
                    .Str("rank1/f")
                    .Raw(one_float.bytes())),
      "section HOOK: the per-rank entries of rank 1 (1) do not have the "
      "names of rank 0's (1) in their order");
  add("a rank missing",
      with_hook(
          Payload().Str("h").U32(1).Str("rank1/e").Raw(one_float.bytes())),
      "with r below 1");
  add("hook entry cut short",
      with_hook(Payload().Str("h").U32(1).Str("s").U8(5).U8(0).U32(3)),
      absl::StrCat("data of communication hook state \"s\" needs 8 bytes at "
                   "offset ",
                   hook_at + 16, ", 4 left"));
  add("hook tensor of unknown dtype",
      with_hook(Payload().Str("h").U32(1).Str("s").U8(0).U8(0).I64(3)),
      absl::StrCat("communication hook state \"s\" at offset ", hook_at + 14,
                   " has unknown dtype code 0"));
  add("hook tensor of 9 dimensions",
      with_hook(Payload().Str("h").U32(1).Str("s").U8(1).U8(9)),
      "communication hook state \"s\" at offset");
  add("a byte left in HOOK",
      with_hook(
          Payload().Str("h").U32(1).Str("s").Raw(steps_tensor.bytes()).U8(0)),
      absl::StrCat("1 unexpected bytes at offset ", hook_at + 24,
                   ", the end of section HOOK"));
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
    cases.push_back({"another section in place of HOOK",
                     s.V2Bytes() + Payload().Section("STAT", s.hook).bytes(),
                     absl::StrCat("expected section HOOK at offset ",
                                  s.V2Bytes().size(), ", found \"STAT\"")});
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
        DecodeCheckpoint(MakeHeader(3, payload) + payload, *model, sgd);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, SomeState("one", "sgd"));
  }
  OneParam model;
  model->w.data().fill_(7);
  torch::optim::SGD sgd(model->parameters(),
                        torch::optim::SGDOptions(0.1).momentum(0.9));
  model->w.mutable_grad() = torch::ones({2});
  sgd.step();
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ExpectDecodeRejected(
        MakeHeader(3, c.payload) + c.payload, *model, sgd,
        StatusIs(absl::StatusCode::kDataLoss,
                 AllOf(HasSubstr("malformed checkpoint payload: "),
                       HasSubstr(c.message))));
    EXPECT_THAT(sgd.state(), SizeIs(model->parameters().size()));
  }
}

}  // namespace
}  // namespace dtrain::trainer
