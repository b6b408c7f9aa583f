// Which models DistributedDataParallel accepts for its backend: everything on
// one device of the backend's kind, dtypes the backend can reduce, refused at
// construction (before any collective) naming the parameters; and mixed
// floating dtypes, averaged in one bucket per dtype. Ranks are threads with
// Gloo on 127.0.0.1.

#include <ATen/ATen.h>
#include <torch/nn/modules/linear.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dist/backend/backend_testing.h"
#include "dist/ddp/ddp.h"
#include "dist/ddp/ddp_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::ddp {
namespace {

using testing::EventLog;
using testing::Gloo;
using ::testing::HasSubstr;
using testing::Input;
using testing::Loss;
using testing::Mlp;
using testing::RecordingBackend;

using backend::testing::RunRanks;

// Reports another backend's name, which DDP's placement check reads.
class RenamedBackend : public RecordingBackend {
 public:
  RenamedBackend(backend::Backend& inner, EventLog* log, std::string name)
      : RecordingBackend(inner, log), name_(std::move(name)) {}
  absl::string_view name() const override { return name_; }

 private:
  std::string name_;
};

// A module of loose tensors, for placements and dtypes no layer has.
std::shared_ptr<torch::nn::Module> Tensors(
    const std::vector<std::pair<std::string, at::Tensor>>& parameters) {
  auto module = std::make_shared<torch::nn::Module>();
  for (const auto& [name, t] : parameters) {
    module->register_parameter(
        name, t, /*requires_grad=*/t.is_floating_point() || t.is_complex());
  }
  return module;
}

absl::Status CreateStatus(std::shared_ptr<torch::nn::Module> module,
                          backend::Backend& b) {
  return DistributedDataParallel::Create(std::move(module), b).status();
}

// Refused before any collective, naming the parameters: every rank fails
// alike instead of one rank's backend failing mid-collective.
TEST(DdpTest, RefusesModelsTheBackendCannotServe) {
  const at::TensorOptions meta = at::TensorOptions().device(at::kMeta);
  RunRanks(1, Gloo(), [&](backend::Backend& b) {
    absl::Status s = CreateStatus(
        Tensors({{"w", at::zeros({2})}, {"v", at::empty({2}, meta)}}), b);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("[rank 0] ddp: the model's parameters and buffers "
                          "are on 2 devices (cpu: w; meta: v); DDP needs them "
                          "all on this rank's one device"));

    s = CreateStatus(Tensors({{"v", at::empty({2}, meta)}}), b);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("the gloo backend reduces CPU tensors, but the model "
                          "is on meta (v): use the nccl backend"));

    EventLog log;
    RenamedBackend nccl(b, &log, "nccl");
    s = CreateStatus(Mlp().ptr(), nccl);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("the nccl backend reduces CUDA tensors, but the "
                          "model is on cpu (fc1.weight, fc1.bias, fc2.weight "
                          "and 3 more): move the module to this rank's GPU"));
    EXPECT_TRUE(log.events().empty()) << "refused after a collective";

    s = CreateStatus(Tensors({{"w", at::zeros({2})},
                              {"z", at::zeros({2}, at::kComplexFloat)},
                              {"n", at::zeros({2}, at::kShort)}}),
                     b);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("the gloo backend cannot reduce z (ComplexFloat, "
                          "trainable), n (int16): trainable parameters must be "
                          "float32, float64, float16 or bfloat16"));
  });
}

// in (float32) -> hidden -> out (float64): one bucket per dtype, each
// averaged as without DDP.
struct MixedImpl : torch::nn::Module {
  MixedImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(8, 6));
    fc2 = register_module("fc2", torch::nn::Linear(6, 4));
    fc2->to(at::kDouble);
  }
  at::Tensor forward(const at::Tensor& x) {
    return fc2(fc1(x).tanh().to(at::kDouble));
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(Mixed);

TEST(DdpTest, MixedDtypesAverageInOneBucketPerDtype) {
  constexpr int kWorld = 2;
  std::vector<at::Tensor> want;
  for (int r = 0; r < kWorld; ++r) {
    torch::manual_seed(7);
    Mixed local;
    Loss(local->forward(Input(r))).backward();
    for (size_t i = 0; i < local->parameters().size(); ++i) {
      const at::Tensor g = local->parameters()[i].grad() / kWorld;
      if (r == 0) {
        want.push_back(g);
      } else {
        want[i] = want[i] + g;
      }
    }
  }
  // Built here: the seed is global, the ranks are threads.
  std::vector<Mixed> models;
  for (int r = 0; r < kWorld; ++r) {
    torch::manual_seed(7);
    models.emplace_back();
  }
  RunRanks(kWorld, Gloo(), [&](backend::Backend& b) {
    Mixed model = models[b.rank()];
    auto ddp = DistributedDataParallel::Create(model.ptr(), b);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    ASSERT_EQ((*ddp)->buckets().size(), 2u);
    EXPECT_EQ((*ddp)->buckets()[0].dtype, at::kDouble);
    EXPECT_EQ((*ddp)->buckets()[1].dtype, at::kFloat);
    EXPECT_EQ((*ddp)->buckets()[1].device, at::Device(at::kCPU));
    ASSERT_TRUE((*ddp)->PrepareForward().ok());
    Loss(model->forward(Input(b.rank()))).backward();
    ASSERT_TRUE((*ddp)->SynchronizeGradients().ok());
    const auto params = model->parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_EQ(params[i].grad().scalar_type(), want[i].scalar_type());
      EXPECT_TRUE(params[i].grad().allclose(want[i], 1e-5, 1e-6))
          << "parameter " << i << " on rank " << b.rank();
    }
  });
}

}  // namespace
}  // namespace dtrain::ddp
