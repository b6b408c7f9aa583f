// State dicts of the project's models through .safetensors files: PyTorch's
// names (torchvision's for ResNet-18), a round trip that restores every
// parameter and buffer bit for bit, and strict loading that names what is
// missing, unexpected or mismatched and leaves the model untouched.

#include "models/state_dict/state_dict.h"

#include <ATen/ATen.h>
#include <torch/nn/modules/linear.h>
#include <torch/utils.h>

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/atomic_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/registry.h"

namespace dtrain::models::state_dict {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Key;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
}

std::shared_ptr<Model> Make(const std::string& name, uint64_t seed,
                            ModelConfig config = {}) {
  torch::manual_seed(seed);
  absl::StatusOr<std::shared_ptr<Model>> m = CreateModel(name, config);
  EXPECT_TRUE(m.ok()) << m.status();
  return *m;
}

bool SameState(const torch::nn::Module& a, const torch::nn::Module& b) {
  const auto x = NamedState(a);
  const auto y = NamedState(b);
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i].first != y[i].first || !at::equal(x[i].second, y[i].second))
      return false;
  }
  return true;
}

TEST(StateDictTest, NamesAreTorchvisionsAndTheBooks) {
  const auto resnet = NamedState(*Make("resnet18", 1));
  EXPECT_EQ(resnet.front().first, "conv1.weight");
  EXPECT_THAT(resnet, Contains(Key("bn1.running_mean")));
  EXPECT_THAT(resnet, Contains(Key("bn1.num_batches_tracked")));
  EXPECT_THAT(resnet, Contains(Key("layer1.0.conv1.weight")));
  EXPECT_THAT(resnet, Contains(Key("layer2.0.downsample.1.running_var")));
  EXPECT_EQ(resnet.back().first, "fc.bias");
  // torchvision's resnet18().state_dict() has 122 entries.
  EXPECT_EQ(resnet.size(), 122u);
  const auto convnet = NamedState(*Make("convnet", 1));
  ASSERT_EQ(convnet.size(), 8u);
  EXPECT_EQ(convnet[0].first, "conv1.weight");
  EXPECT_EQ(convnet[7].first, "fc2.bias");
}

TEST(StateDictTest, RoundTripRestoresEveryParameterAndBuffer) {
  for (const std::string name : {"convnet", "resnet18"}) {
    for (const std::string extension : {".safetensors", ".pt", ".pth"}) {
      std::shared_ptr<Model> trained = Make(name, 1);
      // Buffers that differ from a fresh model's, as after training.
      for (auto& [n, t] : NamedState(*trained)) {
        if (!t.requires_grad()) t.add_(3);
      }
      const std::string path = TempPath(name + extension);
      ASSERT_TRUE(SaveStateDict(*trained, path).ok());
      std::shared_ptr<Model> fresh = Make(name, 2);
      ASSERT_FALSE(SameState(*trained, *fresh));
      const absl::Status s = LoadStateDict(path, *fresh);
      ASSERT_TRUE(s.ok()) << s;
      EXPECT_TRUE(SameState(*trained, *fresh)) << name << extension;
    }
  }
}

TEST(StateDictTest, StrictLoadingNamesWhatDoesNotFit) {
  const std::string path = TempPath("convnet10.safetensors");
  ASSERT_TRUE(SaveStateDict(*Make("convnet", 1), path).ok());

  ModelConfig five_classes;
  five_classes.num_classes = 5;
  std::shared_ptr<Model> five = Make("convnet", 2, five_classes);
  const auto before = NamedState(*five)[6].second.clone();
  absl::Status s = LoadStateDict(path, *five);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("mismatched: fc2.weight (file [10, 64] float32, "
                        "model [5, 64] float32), fc2.bias"));
  EXPECT_TRUE(at::equal(NamedState(*five)[6].second, before));  // untouched

  s = LoadStateDict(path, *Make("resnet18", 2));
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("missing from the file: bn1.weight, bn1.bias"));
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("not in the model: conv1.bias, conv2.bias"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("mismatched: conv1.weight"));
  EXPECT_THAT(std::string(s.message()), HasSubstr(path));

  std::shared_ptr<Model> doubled = Make("convnet", 2);
  doubled->to(at::kDouble);
  s = LoadStateDict(path, *doubled);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("conv1.weight (file [16, 1, 3, 3] float32, model "
                        "[16, 1, 3, 3] float64)"));
}

TEST(StateDictTest, BadFilesAndPathsAreErrors) {
  std::shared_ptr<Model> m = Make("convnet", 1);
  EXPECT_THAT(std::string(SaveStateDict(*m, TempPath("x.bin")).message()),
              HasSubstr("supported: .safetensors, .pt, .pth"));
  EXPECT_EQ(LoadStateDict(TempPath("absent.safetensors"), *m).code(),
            absl::StatusCode::kNotFound);
  const std::string path = TempPath("damaged.safetensors");
  ASSERT_TRUE(SaveStateDict(*m, path).ok());
  std::string bytes = *base::ReadFile(path);
  bytes.resize(bytes.size() - 1);
  ASSERT_TRUE(base::WriteFileAtomically(path, bytes).ok());
  const absl::Status s = LoadStateDict(path, *m);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("damaged.safetensors: "));

  const std::string pt = TempPath("damaged.pt");
  ASSERT_TRUE(SaveStateDict(*m, pt).ok());
  bytes = *base::ReadFile(pt);
  bytes[bytes.size() / 2] ^= 0x40;
  ASSERT_TRUE(base::WriteFileAtomically(pt, bytes).ok());
  EXPECT_THAT(std::string(LoadStateDict(pt, *m).message()),
              HasSubstr("damaged.pt: malformed zip archive: "));
}

TEST(StateDictTest, NamesOfADdpWrapperGetAHint) {
  // Python's DDP(model).state_dict() names "module.conv1.weight", ...
  std::shared_ptr<Model> m = Make("convnet", 1);
  std::vector<TensorEntry> entries = *StateEntries(*m);
  for (TensorEntry& e : entries) e.name = "module." + e.name;
  const absl::Status s = LoadEntries(entries, *m);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("start with 'module.', as a DistributedDataParallel"));
}

}  // namespace
}  // namespace dtrain::models::state_dict
