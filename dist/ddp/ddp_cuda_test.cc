// DistributedDataParallel over NCCL on CUDA: one rank per visible GPU, as
// threads, each with its device made current before its backend exists (as
// //trainer:train does). The averaged gradients must equal a single-process
// reference computed on one GPU, for a float32 model and for one that mixes
// float32 and float16 layers (one bucket per dtype). Skips, saying why, where
// no CUDA device is usable (no GPU, a CPU-only LibTorch, a build without
// NCCL); only portable LibTorch API here, so it builds against both the
// CPU-only LibTorch 1.13 and a CUDA LibTorch 2.x.

#include <ATen/ATen.h>
#include <torch/cuda.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/cuda_device.h"
#include "base/status_macros.h"
#include "dist/backend/backend_testing.h"
#include "dist/backend/nccl/nccl_backend.h"
#include "dist/ddp/ddp.h"
#include "dist/ddp/ddp_testing.h"
#include "gtest/gtest.h"

namespace dtrain::ddp {
namespace {

using backend::testing::RunRanks;

// How many ranks can run (one per GPU, at most 4), or 0 with `why` set.
int UsableGpus(std::string* why) {
  std::string reason;
  if (!backend::NcclAvailable(&reason)) {
    *why = "built without NCCL: " + reason;
    return 0;
  }
  if (!torch::cuda::is_available()) {
    *why =
        "no CUDA device usable from LibTorch (no GPU, or a CPU-only LibTorch: "
        "set LIBTORCH_HOME to a CUDA build)";
    return 0;
  }
  absl::StatusOr<int> count = base::CudaDeviceCount();
  if (!count.ok() || *count < 1) {
    *why = count.ok() ? "the CUDA runtime sees no device"
                      : std::string(count.status().message());
    return 0;
  }
  return std::min(*count, 4);
}

backend::testing::BackendFactory Nccl() {
  return [](int rank, int world_size, std::shared_ptr<store::Store> store)
             -> absl::StatusOr<std::unique_ptr<backend::Backend>> {
    // The rank's device first, so NCCL's context lands there only.
    DTRAIN_RETURN_IF_ERROR(base::SetCurrentCudaDevice(rank));
    backend::Membership group;
    group.rank = rank;
    group.world_size = world_size;
    group.store = std::move(store);
    group.timeout = testing::kTestTimeout;
    backend::NcclBackendOptions o;
    o.device = rank;
    return backend::CreateNcclBackend(group, o);
  };
}

// in (float32) -> hidden -> out, the last layer in `last` (float32 or
// float16); the output in float32.
class NetImpl : public torch::nn::Module {
 public:
  explicit NetImpl(at::ScalarType last) : last_(last) {
    fc1 = register_module("fc1", torch::nn::Linear(8, 16));
    fc2 = register_module("fc2", torch::nn::Linear(16, 16));
    fc3 = register_module("fc3", torch::nn::Linear(16, 4));
    fc3->to(last);
  }
  at::Tensor forward(const at::Tensor& x) {
    return fc3(fc2(fc1(x).tanh()).tanh().to(last_)).to(at::kFloat);
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};

 private:
  at::ScalarType last_;
};
TORCH_MODULE(Net);

// Deterministic, different per rank.
at::Tensor Input(int rank, const at::Device& device) {
  return at::arange(5 * 8, at::kFloat)
      .reshape({5, 8})
      .mul(0.37 * (rank + 1))
      .sin()
      .to(device);
}

at::Tensor Loss(const at::Tensor& out) { return out.pow(2).mean(); }

// The ranks' average gradient, computed in one process on cuda:0, on the
// CPU, in registration order.
std::vector<at::Tensor> ReferenceGradients(at::ScalarType last, int world) {
  const at::Device gpu(at::kCUDA, 0);
  std::vector<at::Tensor> sum;
  for (int r = 0; r < world; ++r) {
    torch::manual_seed(3);
    Net net(last);
    net->to(gpu);
    Loss(net->forward(Input(r, gpu))).backward();
    const auto params = net->parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      const at::Tensor g = params[i].grad().to(at::kCPU, at::kDouble);
      if (r == 0) {
        sum.push_back(g);
      } else {
        sum[i] = sum[i] + g;
      }
    }
  }
  for (at::Tensor& g : sum) g = g / world;
  return sum;
}

class DdpCudaTest : public ::testing::TestWithParam<at::ScalarType> {};

TEST_P(DdpCudaTest, AveragesLikeOneProcess) {
  std::string why;
  const int world = UsableGpus(&why);
  if (world == 0) GTEST_SKIP() << why;
  const at::ScalarType last = GetParam();
  const std::vector<at::Tensor> want = ReferenceGradients(last, world);
  // float16 keeps about three significant digits.
  const double tolerance = last == at::kHalf ? 2e-3 : 1e-5;
  // Different initial weights per rank: the broadcast from rank 0 is part of
  // what is checked. Built here: the seed is global, the ranks are threads.
  std::vector<Net> nets;
  for (int r = 0; r < world; ++r) {
    torch::manual_seed(r == 0 ? 3 : 100 + r);
    nets.emplace_back(last);
  }
  RunRanks(world, Nccl(), [&](backend::Backend& b) {
    const at::Device gpu(at::kCUDA, static_cast<c10::DeviceIndex>(b.rank()));
    Net net = nets[b.rank()];
    net->to(gpu);
    auto ddp = DistributedDataParallel::Create(net.ptr(), b);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    const std::vector<BucketInfo>& buckets = (*ddp)->buckets();
    ASSERT_EQ(buckets.size(), last == at::kFloat ? 1u : 2u);
    for (const BucketInfo& bucket : buckets) EXPECT_EQ(bucket.device, gpu);
    ASSERT_TRUE((*ddp)->PrepareForward().ok());
    Loss(net->forward(Input(b.rank(), gpu))).backward();
    ASSERT_TRUE((*ddp)->SynchronizeGradients().ok());
    const auto params = net->parameters();
    ASSERT_EQ(params.size(), want.size());
    for (size_t i = 0; i < params.size(); ++i) {
      const at::Tensor got = params[i].grad().to(at::kCPU, at::kDouble);
      const double error = (got - want[i]).abs().max().item<double>();
      const double scale = want[i].abs().max().item<double>();
      EXPECT_LE(error, tolerance * std::max(1.0, scale))
          << "rank " << b.rank() << ", parameter " << i << " ("
          << c10::toString(params[i].scalar_type()) << ")";
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Dtypes, DdpCudaTest,
                         ::testing::Values(at::kFloat, at::kHalf),
                         [](const ::testing::TestParamInfo<at::ScalarType>& i) {
                           return i.param == at::kFloat ? "Float32"
                                                        : "Float32AndFloat16";
                         });

}  // namespace
}  // namespace dtrain::ddp
