// NCCL backend: what can be checked on any machine (the build-without-NCCL and
// no-device errors), and correctness on CUDA tensors, which runs only where a
// GPU and a CUDA-enabled LibTorch are present and otherwise skips saying why.

#include "dist/backend/nccl/nccl_backend.h"

#include <ATen/ATen.h>
#include <torch/cuda.h>

#include <string>

#include "dist/backend/backend_testing.h"
#include "dist/store/hash_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "third_party/cuda_config.h"

namespace dtrain::backend {
namespace {

using ::testing::HasSubstr;

NcclBackendOptions Options(int rank, int world_size) {
  NcclBackendOptions o;
  o.rank = rank;
  o.world_size = world_size;
  o.store = std::make_shared<store::HashStore>();
  o.device = rank;
  o.timeout = absl::Seconds(60);
  return o;
}

// The reason GPU tests cannot run here, or empty when they can.
std::string WhyNoGpu() {
  std::string reason;
  if (!NcclAvailable(&reason)) return "built without NCCL: " + reason;
  if (!torch::cuda::is_available()) {
    return "no CUDA device usable from LibTorch (no GPU, or a CPU-only "
           "LibTorch: set "
           "LIBTORCH_HOME to a CUDA build)";
  }
  return "";
}

TEST(NcclBackendTest, ReportsWhyItCannotRunHere) {
  if (WhyNoGpu().empty())
    GTEST_SKIP() << "a GPU is available: covered by the tests below";
  absl::StatusOr<std::unique_ptr<Backend>> b = CreateNcclBackend(Options(0, 1));
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kFailedPrecondition)
      << b.status();
  const std::string m(b.status().message());
  EXPECT_THAT(m, HasSubstr("[rank 0] nccl: "));
#if DTRAIN_HAVE_NCCL
  // Built with NCCL on a machine without a GPU.
  EXPECT_THAT(m, HasSubstr("no CUDA device is visible"));
#else
  EXPECT_THAT(m, HasSubstr("built without NCCL"));
#endif
}

TEST(NcclBackendTest, RejectsBadRank) {
  absl::StatusOr<std::unique_ptr<Backend>> b = CreateNcclBackend(Options(2, 2));
  ASSERT_FALSE(b.ok());
  // Either the rank check or the missing-NCCL check speaks first; both are
  // argument problems.
  EXPECT_NE(b.status().code(), absl::StatusCode::kOk);
}

TEST(NcclBackendTest, AllReduceBroadcastAllGatherOnGpus) {
  if (const std::string why = WhyNoGpu(); !why.empty()) GTEST_SKIP() << why;
  const int w = static_cast<int>(torch::cuda::device_count());
  testing::RunRanks(
      w,
      [](int rank, int world_size, std::shared_ptr<store::Store> store) {
        NcclBackendOptions o;
        o.rank = rank;
        o.world_size = world_size;
        o.store = std::move(store);
        o.device = rank;
        return CreateNcclBackend(o);
      },
      [&](Backend& b) {
        const at::Device dev(at::kCUDA, b.rank());
        for (at::ScalarType dtype : {at::kFloat, at::kHalf, at::kLong}) {
          for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1023},
                            int64_t{(1 << 20) + 3}}) {
            at::Tensor i =
                at::arange(n, at::TensorOptions(at::kLong).device(dev));
            at::Tensor t = (i.remainder(3) + (b.rank() + 1)).to(dtype);
            ASSERT_TRUE(b.AllReduce(t)->Wait().ok());
            at::Tensor want = i.remainder(3) * w + w * (w + 1) / 2;
            EXPECT_TRUE(at::equal(t.to(at::kLong), want));
            at::Tensor c =
                at::full({n}, b.rank(), at::TensorOptions(dtype).device(dev));
            ASSERT_TRUE(b.Broadcast(c, w - 1)->Wait().ok());
            EXPECT_TRUE(at::equal(c, at::full({n}, w - 1, c.options())));
          }
        }
        // A CPU tensor is refused with a clear message.
        absl::Status s = b.AllReduce(at::ones({4}))->Wait();
        EXPECT_THAT(std::string(s.message()), HasSubstr("needs CUDA tensors"));
      });
}

}  // namespace
}  // namespace dtrain::backend
