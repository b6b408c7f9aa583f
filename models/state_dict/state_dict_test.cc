// State dicts of the project's models through .safetensors files: PyTorch's
// names (torchvision's for ResNet-18), a round trip that restores every
// parameter and buffer bit for bit, strict loading that names what is
// missing, unexpected or mismatched and leaves the model untouched, and the
// relaxed loading of fine-tuning: PyTorch's strict=False and entries left
// out (a 1000-class head into a 3-class model).

#include "models/state_dict/state_dict.h"

#include <ATen/ATen.h>
#include <sys/stat.h>
#include <torch/nn/modules/linear.h>
#include <torch/utils.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/atomic_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/registry.h"
#include "models/state_dict/hostile_weights.h"
#include "models/state_dict/torch_pickle.h"
#include "models/state_dict/zip_archive.h"

namespace dtrain::models::state_dict {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Key;
using ::testing::Not;

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
              HasSubstr("not in the model: conv1.bias, conv2.weight"));
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
  std::string bytes = *base::ReadFile(path, base::kWeightsFileLimit);
  bytes.resize(bytes.size() - 1);
  ASSERT_TRUE(base::WriteFileAtomically(path, bytes).ok());
  const absl::Status s = LoadStateDict(path, *m);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("damaged.safetensors: "));

  const std::string pt = TempPath("damaged.pt");
  ASSERT_TRUE(SaveStateDict(*m, pt).ok());
  bytes = *base::ReadFile(pt, base::kWeightsFileLimit);
  bytes[bytes.size() / 2] ^= 0x40;
  ASSERT_TRUE(base::WriteFileAtomically(pt, bytes).ok());
  EXPECT_THAT(std::string(LoadStateDict(pt, *m).message()),
              HasSubstr("damaged.pt: malformed zip archive: "));
}

// A weights path that names a device or a FIFO is refused without reading
// (/dev/zero grew until killed) or blocking (a FIFO waited for a writer).
TEST(StateDictTest, WeightsThatAreNotRegularFilesAreRefused) {
  std::shared_ptr<Model> m = Make("convnet", 1);
  const std::string zero = TempPath("zero.pt");
  std::remove(zero.c_str());
  ASSERT_EQ(::symlink("/dev/zero", zero.c_str()), 0);
  absl::Status s = LoadStateDict(zero, *m);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("a character device"));
  const std::string fifo = TempPath("fifo.safetensors");
  std::remove(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  s = LoadStateDict(fifo, *m);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("a FIFO"));
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

// The named tensor of a module, cloned (so that later loads do not change it).
at::Tensor Get(const torch::nn::Module& m, const std::string& name) {
  for (const auto& [n, t] : NamedState(m)) {
    if (n == name) return t.detach().clone();
  }
  ADD_FAILURE() << "no " << name;
  return at::Tensor();
}

TEST(StateDictTest, ExcludedHeadKeepsItsInitialValues) {
  // torchvision's resnet18() (1000 classes) into a 3-class ResNet-18.
  ModelConfig imagenet;
  imagenet.num_classes = 1000;
  std::shared_ptr<Model> source = Make("resnet18", 1, imagenet);
  const std::string path = TempPath("resnet1000.pth");
  ASSERT_TRUE(SaveStateDict(*source, path).ok());
  ModelConfig three;
  three.num_classes = 3;

  LoadOptions strict;
  strict.exclude_flag = "--leave_out";
  std::shared_ptr<Model> refused = Make("resnet18", 2, three);
  const at::Tensor conv1_before = Get(*refused, "conv1.weight");
  absl::StatusOr<LoadReport> r = LoadStateDict(path, *refused, strict);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("mismatched: fc.weight (file [1000, 512] float32, "
                        "model [3, 512] float32), fc.bias (file [1000] "));
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("leave them out: --leave_out=fc"));
  EXPECT_TRUE(at::equal(Get(*refused, "conv1.weight"), conv1_before));
  // Without a flag's name, no hint.
  EXPECT_THAT(std::string(LoadStateDict(path, *refused).message()),
              Not(HasSubstr("leave")));

  for (const std::string pattern : {"fc", "fc."}) {
    std::shared_ptr<Model> tuned = Make("resnet18", 2, three);
    const at::Tensor head = Get(*tuned, "fc.weight");
    LoadOptions options;
    options.exclude = {pattern};
    r = LoadStateDict(path, *tuned, options);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_THAT(r->excluded, ElementsAre("fc.weight", "fc.bias"));
    EXPECT_THAT(r->skipped, ElementsAre("fc.weight", "fc.bias"));
    EXPECT_EQ(r->loaded.size(), 120u);
    EXPECT_THAT(r->missing, IsEmpty());
    EXPECT_THAT(r->unexpected, IsEmpty());
    EXPECT_EQ(r->Summary(),
              "120 of 122 entries loaded; left out (kept as initialised): "
              "fc.weight, fc.bias");
    EXPECT_TRUE(at::equal(Get(*tuned, "fc.weight"), head)) << pattern;
    for (const std::string& name : r->loaded) {
      EXPECT_TRUE(at::equal(Get(*tuned, name), Get(*source, name))) << name;
    }
  }

  // An exact name leaves out that entry only: fc.bias still mismatches.
  LoadOptions weight_only;
  weight_only.exclude = {"fc.weight"};
  r = LoadStateDict(path, *Make("resnet18", 2, three), weight_only);
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("mismatched: fc.bias (file [1000] float32, model [3] "
                        "float32))"));

  // A pattern covers whole modules: "layer4" leaves out everything under it
  // (and "conv" covers no "conv1.weight": ExclusionsThatNameNothingAreErrors).
  LoadOptions layer4;
  layer4.exclude = {"layer4", "fc"};
  r = LoadStateDict(path, *Make("resnet18", 2, three), layer4);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->excluded.size(), 18u + 12u + 2u);  // layer4.0, layer4.1, fc
  EXPECT_EQ(r->excluded.front(), "layer4.0.conv1.weight");
}

TEST(StateDictTest, ExclusionsThatNameNothingAreErrors) {
  std::shared_ptr<Model> m = Make("resnet18", 1);
  const std::vector<TensorEntry> entries = *StateEntries(*Make("resnet18", 2));
  const at::Tensor before = Get(*m, "conv1.weight");
  LoadOptions options;
  options.exclude = {"fc", "fcc", "conv"};
  options.exclude_flag = "--leave_out";
  absl::StatusOr<LoadReport> r = LoadEntries(entries, *m, options);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "--leave_out: 'fcc', 'conv' names no entry of the file or the "
            "model (the model's modules: conv1, bn1, layer1, layer2, layer3, "
            "layer4, fc)");
  EXPECT_TRUE(at::equal(Get(*m, "conv1.weight"), before));  // untouched

  // An exclusion that covers only the module's names, or only the file's,
  // names something: it keeps those out of the check.
  std::vector<TensorEntry> without_head;
  for (const TensorEntry& e : entries) {
    if (!absl::StartsWith(e.name, "fc.")) without_head.push_back(e);
  }
  options.exclude = {"fc"};
  r = LoadEntries(without_head, *m, options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->excluded, ElementsAre("fc.weight", "fc.bias"));
  EXPECT_THAT(r->skipped, IsEmpty());
}

TEST(StateDictTest, NonStrictAllowsMissingAndUnexpectedNames) {
  std::shared_ptr<Model> source = Make("convnet", 1);
  std::vector<TensorEntry> entries = *StateEntries(*source);
  ASSERT_EQ(entries.back().name, "fc2.bias");
  entries.pop_back();
  TensorEntry extra = entries.front();
  extra.name = "extra.weight";
  entries.push_back(extra);

  std::shared_ptr<Model> m = Make("convnet", 2);
  const at::Tensor bias = Get(*m, "fc2.bias");
  LoadOptions strict;
  strict.strict_flag = "--strict";
  absl::StatusOr<LoadReport> r = LoadEntries(entries, *m, strict);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("missing from the file: fc2.bias; not in the model: "
                        "extra.weight)"));
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("--strict=false allows missing and unexpected"));
  EXPECT_FALSE(
      at::equal(Get(*m, "conv1.weight"), Get(*source, "conv1.weight")));

  LoadOptions relaxed;
  relaxed.strict = false;
  r = LoadEntries(entries, *m, relaxed);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->missing, ElementsAre("fc2.bias"));
  EXPECT_THAT(r->unexpected, ElementsAre("extra.weight"));
  EXPECT_EQ(r->loaded.size(), 7u);
  EXPECT_THAT(r->excluded, IsEmpty());
  EXPECT_EQ(r->Summary(),
            "7 of 8 entries loaded; missing from the file (kept as "
            "initialised): fc2.bias; not in the model (ignored): extra.weight");
  EXPECT_TRUE(at::equal(Get(*m, "fc2.bias"), bias));
  EXPECT_TRUE(at::equal(Get(*m, "conv1.weight"), Get(*source, "conv1.weight")));
  EXPECT_TRUE(at::equal(Get(*m, "fc2.weight"), Get(*source, "fc2.weight")));
}

TEST(StateDictTest, NonStrictStillRefusesShapeAndDtypeMismatches) {
  // As PyTorch's load_state_dict(strict=False), which raises "size mismatch".
  const std::vector<TensorEntry> entries = *StateEntries(*Make("convnet", 1));
  ModelConfig five_classes;
  five_classes.num_classes = 5;
  std::shared_ptr<Model> five = Make("convnet", 2, five_classes);
  const at::Tensor before = Get(*five, "conv1.weight");
  LoadOptions relaxed;
  relaxed.strict = false;
  relaxed.exclude_flag = "--leave_out";
  absl::StatusOr<LoadReport> r = LoadEntries(entries, *five, relaxed);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("(mismatched: fc2.weight (file [10, 64] float32, "
                        "model [5, 64] float32), fc2.bias"));
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("leave them out: --leave_out=fc2"));
  EXPECT_TRUE(at::equal(Get(*five, "conv1.weight"), before));  // untouched

  std::shared_ptr<Model> doubled = Make("convnet", 2);
  doubled->to(at::kDouble);
  r = LoadEntries(entries, *doubled, relaxed);
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("conv1.weight (file [16, 1, 3, 3] float32, model "
                        "[16, 1, 3, 3] float64)"));
}

// Names that share a storage load as views of it, as torch.load makes them:
// the storage is read once, however many names it has.

TEST(StateDictTest, ViewsOfOneStorageLoadIntoTheModel) {
  // Linear(4, 3)'s weight and bias as views of one storage of 16 floats:
  // the weight transposed (strides 1, 4), the bias at offset 12.
  std::string storage(16 * 4, '\0');
  for (int i = 0; i < 16; ++i) {
    const float v = static_cast<float>(i);
    std::memcpy(storage.data() + 4 * i, &v, 4);
  }
  PickledTensor weight;
  weight.storage_key = "0";
  weight.storage_numel = 16;
  weight.size = {3, 4};
  weight.stride = {1, 3};
  // Built afresh, not as a copy of weight with size and stride reassigned:
  // GCC 14 misreads that assignment under C++20 (-Warray-bounds).
  PickledTensor bias;
  bias.storage_key = "0";
  bias.storage_numel = 16;
  bias.offset = 12;
  bias.size = {3};
  bias.stride = {1};
  const std::string path = TempPath("views.pt");
  ASSERT_TRUE(base::WriteFileAtomically(
                  path, *WriteZip({{"archive/data.pkl",
                                    WriteStateDictPickle(
                                        {{"weight", weight}, {"bias", bias}})},
                                   {"archive/data/0", storage}}))
                  .ok());
  torch::nn::Linear linear(4, 3);
  ASSERT_TRUE(LoadStateDict(path, *linear).ok());
  const at::Tensor all = at::arange(16, at::kFloat);
  EXPECT_TRUE(at::equal(linear->weight,
                        all.as_strided({3, 4}, {1, 3}, 0).contiguous()));
  EXPECT_TRUE(at::equal(linear->bias, at::arange(12, 15, at::kFloat)));
}

TEST(StateDictTest, NamesSharingAStorageShareItInMemory) {
  for (bool memoized : {false, true}) {
    const std::string path = TempPath("shared.pt");
    ASSERT_TRUE(base::WriteFileAtomically(
                    path, SharedStorageArchive(3000, 1 << 20, memoized))
                    .ok());
    absl::StatusOr<std::vector<std::pair<std::string, at::Tensor>>> tensors =
        LoadTensors(path);
    ASSERT_TRUE(tensors.ok()) << tensors.status();
    ASSERT_EQ(tensors->size(), 3000u);
    const at::Tensor& first = (*tensors)[0].second;
    EXPECT_EQ(first.numel(), 1 << 18);
    EXPECT_EQ(first[1999].item<float>(), 999);
    for (const auto& [name, tensor] : *tensors) {
      EXPECT_TRUE(tensor.storage().is_alias_of(first.storage())) << name;
      EXPECT_EQ(tensor.data_ptr(), first.data_ptr()) << name;
    }
  }
}

TEST(StateDictTest, LoadingNamesSharingAStorageStaysInABoundedAddressSpace) {
  if (!CanLimitAddressSpace()) {
    GTEST_SKIP() << "RLIMIT_AS cannot bound AddressSanitizer's shadow "
                    "memory; aliasing is checked above";
  }
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string path = TempPath("shared_bounded.pt");
  ASSERT_TRUE(base::WriteFileAtomically(
                  path, SharedStorageArchive(3000, 1 << 20, false))
                  .ok());
  // A copy per name took 3 GB (7 GB in model_logits); one storage, 1 MB.
  auto load = [&path] {
    std::shared_ptr<Model> model = Make("convnet", 1);
    LimitAddressSpace(uint64_t{256} << 20);
    LoadOptions relaxed;
    relaxed.strict = false;
    absl::StatusOr<LoadReport> report = LoadStateDict(path, *model, relaxed);
    auto tensors = LoadTensors(path);
    std::exit(report.ok() && report->unexpected.size() == 3000 &&
                      tensors.ok() && tensors->size() == 3000
                  ? 0
                  : 1);
  };
  EXPECT_EXIT(load(), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace dtrain::models::state_dict
