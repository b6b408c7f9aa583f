#include "trainer/checkpoint/checkpoint_testing.h"

#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <ostream>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/crc32_testing.h"
#include "base/torch_compat.h"
#include "gtest/gtest.h"
#include "optim/adadelta.h"

namespace dtrain::trainer::testing {
namespace {

using ::testing::MatchResultListener;

class StatusIsMatcher
    : public ::testing::MatcherInterface<const absl::Status&> {
 public:
  StatusIsMatcher(::testing::Matcher<absl::StatusCode> code,
                  ::testing::Matcher<const std::string&> message)
      : code_(std::move(code)), message_(std::move(message)) {}

  bool MatchAndExplain(const absl::Status& status,
                       MatchResultListener* listener) const override {
    if (!code_.MatchAndExplain(status.code(), listener)) {
      *listener << "whose code does not match";
      return false;
    }
    const std::string message(status.message());
    if (!message_.MatchAndExplain(message, listener)) {
      *listener << "whose message does not match";
      return false;
    }
    return true;
  }
  void DescribeTo(std::ostream* os) const override {
    *os << "has a code that ";
    code_.DescribeTo(os);
    *os << " and a message that ";
    message_.DescribeTo(os);
  }
  void DescribeNegationTo(std::ostream* os) const override {
    *os << "has a code that ";
    code_.DescribeNegationTo(os);
    *os << " or a message that ";
    message_.DescribeNegationTo(os);
  }

 private:
  const ::testing::Matcher<absl::StatusCode> code_;
  const ::testing::Matcher<const std::string&> message_;
};

torch::Tensor TinyLoss(Tiny& model, int64_t seed) {
  torch::manual_seed(seed);
  torch::Tensor x = torch::randn({6, 4});
  torch::Tensor target = torch::randn({6, 3});
  return (model->forward(x) - target).pow(2).mean();
}

void ExpectSameByName(const torch::OrderedDict<std::string, torch::Tensor>& a,
                      const torch::OrderedDict<std::string, torch::Tensor>& b,
                      absl::string_view what) {
  ASSERT_EQ(a.keys(), b.keys()) << what << " names";
  for (const auto& item : a) {
    EXPECT_TRUE(BitwiseEqual(item.value(), b[item.key()]))
        << what << " " << item.key();
  }
}

torch::Tensor CloneIfDefined(const torch::Tensor& t) {
  return t.defined() ? t.clone() : torch::Tensor();
}

}  // namespace

TinyImpl::TinyImpl(int64_t in, int64_t hidden, bool extra) {
  fc = register_module("fc", torch::nn::Linear(in, hidden));
  bn = register_module("bn", torch::nn::BatchNorm1d(hidden));
  head = register_module("head", torch::nn::Linear(hidden, 3));
  if (extra) tail = register_module("tail", torch::nn::Linear(3, 3));
}

torch::Tensor TinyImpl::forward(const torch::Tensor& x) {
  torch::Tensor y = head(torch::relu(bn(fc(x))));
  return tail.is_empty() ? y : tail(y);
}

void TinyStep(Tiny& model, torch::optim::Optimizer& optimizer, int64_t seed) {
  optimizer.zero_grad();
  TinyLoss(model, seed).backward();
  optimizer.step();
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

HookState SomeHookState() {
  HookState hook;
  hook.name = "tiny_hook";
  hook.tensors.emplace_back(
      "q.0", torch::arange(6, torch::kFloat).reshape({2, 3}) - 2.5);
  hook.tensors.emplace_back("steps", torch::scalar_tensor(41, torch::kLong));
  return hook;
}

std::string TinyCheckpoint(int64_t seed) {
  torch::manual_seed(seed);
  Tiny model;
  torch::optim::SGD sgd(model->parameters(),
                        torch::optim::SGDOptions(0.1).momentum(0.9));
  TinyStep(model, sgd, seed);
  absl::StatusOr<std::string> bytes =
      EncodeCheckpoint(*model, sgd, SomeState("tiny", "sgd"), SomeHookState());
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? *bytes : "";
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

void ExpectSameHookState(const HookState& a, const HookState& b) {
  EXPECT_EQ(a.name, b.name);
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    EXPECT_EQ(a.tensors[i].first, b.tensors[i].first) << "entry " << i;
    EXPECT_TRUE(BitwiseEqual(a.tensors[i].second, b.tensors[i].second))
        << a.tensors[i].first;
  }
  ASSERT_EQ(a.ranks.size(), b.ranks.size());
  for (size_t r = 0; r < a.ranks.size(); ++r) {
    ASSERT_EQ(a.ranks[r].size(), b.ranks[r].size()) << "rank " << r;
    for (size_t i = 0; i < a.ranks[r].size(); ++i) {
      EXPECT_EQ(a.ranks[r][i].first, b.ranks[r][i].first);
      EXPECT_TRUE(BitwiseEqual(a.ranks[r][i].second, b.ranks[r][i].second))
          << "rank " << r << " " << a.ranks[r][i].first;
    }
  }
}

void ExpectSameTensors(const torch::nn::Module& a, const torch::nn::Module& b) {
  ExpectSameByName(a.named_parameters(), b.named_parameters(), "parameter");
  ExpectSameByName(a.named_buffers(), b.named_buffers(), "buffer");
}

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

OptimizerSnapshot Snapshot(const torch::optim::Optimizer& optimizer) {
  OptimizerSnapshot out;
  out.state_size = optimizer.state().size();
  for (const torch::optim::OptimizerParamGroup& group :
       optimizer.param_groups()) {
    for (const torch::Tensor& param : group.params()) {
      OptimizerSnapshot::ParamState& saved = out.params.emplace_back();
      auto it =
          optimizer.state().find(torch_compat::OptimizerStateKeyOf(param));
      if (it == optimizer.state().end()) continue;
      saved.present = true;
      const torch::optim::OptimizerParamState* state = it->second.get();
      if (const auto* sgd =
              dynamic_cast<const torch::optim::SGDParamState*>(state)) {
        saved.tensors = {CloneIfDefined(sgd->momentum_buffer())};
      } else if (const auto* adadelta =
                     dynamic_cast<const optim::AdadeltaParamState*>(state)) {
        saved.step = adadelta->step();
        saved.tensors = {CloneIfDefined(adadelta->square_avg()),
                         CloneIfDefined(adadelta->acc_delta())};
      } else {
        ADD_FAILURE() << "no snapshot of this optimizer's state";
      }
    }
  }
  return out;
}

void ExpectUnchanged(const OptimizerSnapshot& snapshot,
                     const torch::optim::Optimizer& optimizer) {
  const OptimizerSnapshot now = Snapshot(optimizer);
  EXPECT_EQ(now.state_size, snapshot.state_size);
  ASSERT_EQ(now.params.size(), snapshot.params.size());
  for (size_t i = 0; i < now.params.size(); ++i) {
    const OptimizerSnapshot::ParamState& a = now.params[i];
    const OptimizerSnapshot::ParamState& b = snapshot.params[i];
    ASSERT_EQ(a.present, b.present) << "state of parameter " << i;
    EXPECT_EQ(a.step, b.step) << "step of parameter " << i;
    ASSERT_EQ(a.tensors.size(), b.tensors.size()) << "parameter " << i;
    for (size_t k = 0; k < a.tensors.size(); ++k) {
      ASSERT_EQ(a.tensors[k].defined(), b.tensors[k].defined())
          << "state tensor " << k << " of parameter " << i;
      if (a.tensors[k].defined()) {
        EXPECT_TRUE(BitwiseEqual(a.tensors[k], b.tensors[k]))
            << "state tensor " << k << " of parameter " << i;
      }
    }
  }
}

::testing::Matcher<const absl::Status&> StatusIs(
    const ::testing::Matcher<absl::StatusCode>& code,
    const ::testing::Matcher<const std::string&>& message) {
  return ::testing::MakeMatcher(new StatusIsMatcher(code, message));
}

void ExpectDecodeRejected(absl::string_view bytes, torch::nn::Module& model,
                          torch::optim::Optimizer& optimizer,
                          const ::testing::Matcher<const absl::Status&>& status,
                          absl::string_view expected_model_name,
                          absl::string_view expected_optimizer_name) {
  const std::vector<torch::Tensor> model_before = Snapshot(model);
  const OptimizerSnapshot optimizer_before = Snapshot(optimizer);
  absl::StatusOr<TrainingState> decoded = DecodeCheckpoint(
      bytes, model, optimizer, expected_model_name, expected_optimizer_name);
  EXPECT_THAT(decoded.status(), status);
  ExpectUnchanged(model_before, model);
  ExpectUnchanged(optimizer_before, optimizer);
}

std::string MakeHeader(uint32_t version, absl::string_view payload) {
  return Payload()
      .Raw("DTRAINCK")
      .U32(version)
      .U64(payload.size())
      .U32(base::testing::BitwiseCrc32(payload))
      .bytes();
}

Payload& Payload::U8(uint8_t v) {
  bytes_.push_back(static_cast<char>(v));
  return *this;
}

Payload& Payload::U32(uint32_t v) { return Put(v, 4); }

Payload& Payload::U64(uint64_t v) { return Put(v, 8); }

Payload& Payload::I64(int64_t v) { return Put(static_cast<uint64_t>(v), 8); }

Payload& Payload::F64(double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  return Put(bits, 8);
}

Payload& Payload::Str(absl::string_view s) {
  U32(static_cast<uint32_t>(s.size()));
  return Raw(s);
}

Payload& Payload::Raw(absl::string_view s) {
  bytes_.append(s.data(), s.size());
  return *this;
}

Payload& Payload::Floats(const std::vector<float>& values) {
  return Raw(absl::string_view(reinterpret_cast<const char*>(values.data()),
                               values.size() * sizeof(float)));
}

Payload& Payload::Section(absl::string_view tag, const Payload& body) {
  Raw(tag);
  U64(body.bytes_.size());
  return Raw(body.bytes_);
}

Payload& Payload::Put(uint64_t v, int size) {
  for (int i = 0; i < size; ++i)
    bytes_.push_back(static_cast<char>(v >> (8 * i)));
  return *this;
}

std::string MakeTempDir() {
  std::string templ =
      absl::StrCat(::testing::TempDir(), "/checkpoint_test.XXXXXX");
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
  // The tests only need the names; a DIR* loop is enough.
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

}  // namespace dtrain::trainer::testing
