// NCCL backend, ranks as threads of one process (one per GPU): what can be
// checked on any machine (the build-without-NCCL and no-device errors), and
// every collective on CUDA tensors, timeouts and aborts where GPUs and a
// CUDA-enabled LibTorch are present; elsewhere those skip saying why.
// Real processes: nccl_multiprocess_test.cc.

#include "dist/backend/nccl/nccl_backend.h"

#include <ATen/ATen.h>
#include <torch/cuda.h>

#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/cuda_device.h"
#include "base/status_macros.h"
#include "dist/backend/backend_testing.h"
#include "dist/store/hash_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "third_party/cuda_config.h"

namespace dtrain::backend {
namespace {

using ::testing::HasSubstr;

// Rank `rank` of `world_size` over a store of its own (enough for creation's
// argument checks and for one rank).
Membership Group(int rank, int world_size,
                 absl::Duration timeout = absl::Seconds(60)) {
  Membership m;
  m.rank = rank;
  m.world_size = world_size;
  m.store = std::make_shared<store::HashStore>();
  m.timeout = timeout;
  return m;
}

// How many devices the CUDA runtime sees: what creating the backend asks.
int RuntimeDevices() {
  absl::StatusOr<int> n = base::CudaDeviceCount();
  return n.ok() ? *n : 0;
}

// Why the backend cannot be created here, or empty when it can.
std::string WhyNoDevice() {
  std::string reason;
  if (!NcclAvailable(&reason)) return "built without NCCL: " + reason;
  if (RuntimeDevices() == 0) return "the CUDA runtime sees no device";
  return "";
}

// Why CUDA tensors cannot be made here (so no collective can run), or empty.
std::string WhyNoGpu(int want = 1) {
  if (std::string why = WhyNoDevice(); !why.empty()) return why;
  if (!torch::cuda::is_available()) {
    return "this LibTorch has no CUDA (set LIBTORCH_HOME to a CUDA build)";
  }
  const int have = static_cast<int>(torch::cuda::device_count());
  if (have < want) {
    return absl::StrCat("needs ", want, " CUDA devices, ", have, " visible");
  }
  return "";
}

// A factory for RunRanks: rank r on cuda:r, made current first as train does.
testing::BackendFactory Factory(absl::Duration timeout = absl::Seconds(60)) {
  return
      [timeout](int rank, int world_size, std::shared_ptr<store::Store> store)
          -> absl::StatusOr<std::unique_ptr<Backend>> {
        DTRAIN_RETURN_IF_ERROR(base::SetCurrentCudaDevice(rank));
        Membership group;
        group.rank = rank;
        group.world_size = world_size;
        group.store = std::move(store);
        group.timeout = timeout;
        NcclBackendOptions o;
        o.device = rank;
        return CreateNcclBackend(group, o);
      };
}

at::TensorOptions On(const Backend& b, at::ScalarType dtype) {
  return at::TensorOptions(dtype).device(at::kCUDA, b.rank());
}

// Waits on the host until `work` completed (Wait itself only orders the
// stream), bounded by the test's timeout.
absl::Status Finished(Work& work) {
  while (!work.IsCompleted()) absl::SleepFor(absl::Milliseconds(1));
  return work.status();
}

TEST(NcclBackendTest, ReportsWhyItCannotRunHere) {
  if (WhyNoDevice().empty()) {
    GTEST_SKIP() << "the CUDA runtime sees a GPU: creation succeeds there "
                    "(CreatesWhereTheRuntimeSeesAGpu)";
  }
  absl::StatusOr<std::unique_ptr<Backend>> b = CreateNcclBackend(Group(0, 1));
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

// Creation asks the CUDA runtime, not LibTorch: with a GPU it succeeds even
// under a CPU-only LibTorch (the case the old version of the test above got
// wrong, asserting failure on exactly the machines that matter).
TEST(NcclBackendTest, CreatesWhereTheRuntimeSeesAGpu) {
  if (const std::string why = WhyNoDevice(); !why.empty()) GTEST_SKIP() << why;
  absl::StatusOr<std::unique_ptr<Backend>> b = CreateNcclBackend(Group(0, 1));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)->name(), "nccl");
}

TEST(NcclBackendTest, RejectsBadRankAndDevice) {
  absl::StatusOr<std::unique_ptr<Backend>> b = CreateNcclBackend(Group(2, 2));
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument)
      << b.status();
  if (!WhyNoDevice().empty()) return;
  NcclBackendOptions o;
  o.device = RuntimeDevices();
  b = CreateNcclBackend(Group(0, 1), o);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      std::string(b.status().message()),
      HasSubstr(absl::StrCat("device cuda:", o.device, " does not exist (",
                             o.device, " visible)")));
}

TEST(NcclBackendTest, AllReduceBroadcastAllGatherOnGpus) {
  if (const std::string why = WhyNoGpu(); !why.empty()) GTEST_SKIP() << why;
  const int w = static_cast<int>(torch::cuda::device_count());
  testing::RunRanks(w, Factory(), [&](Backend& b) {
    for (at::ScalarType dtype :
         {at::kFloat, at::kHalf, at::kBFloat16, at::kLong}) {
      for (int64_t n :
           {int64_t{0}, int64_t{1}, int64_t{1023}, int64_t{(1 << 20) + 3}}) {
        at::Tensor i = at::arange(n, On(b, at::kLong));
        at::Tensor t = (i.remainder(3) + (b.rank() + 1)).to(dtype);
        ASSERT_TRUE(b.AllReduce(t)->Wait().ok());
        at::Tensor want = i.remainder(3) * w + w * (w + 1) / 2;
        // .cpu() synchronizes the stream Wait ordered.
        EXPECT_TRUE(at::equal(t.to(at::kLong).cpu(), want.cpu()));
        at::Tensor c = at::full({n}, b.rank(), On(b, dtype));
        ASSERT_TRUE(b.Broadcast(c, w - 1)->Wait().ok());
        EXPECT_TRUE(
            at::equal(c.cpu(), at::full({n}, w - 1, c.options()).cpu()));
        std::vector<at::Tensor> outs;
        for (int r = 0; r < w; ++r)
          outs.push_back(at::empty({n}, On(b, dtype)));
        ASSERT_TRUE(b.AllGather(outs, at::full({n}, b.rank(), On(b, dtype)))
                        ->Wait()
                        .ok());
        for (int r = 0; r < w; ++r) {
          EXPECT_TRUE(at::equal(outs[r].cpu(),
                                at::full({n}, r, outs[r].options()).cpu()));
        }
      }
    }
    // A CPU tensor is refused with a clear message.
    absl::Status s = b.AllReduce(at::ones({4}))->Wait();
    EXPECT_THAT(std::string(s.message()), HasSubstr("needs CUDA tensors"));
  });
}

TEST(NcclBackendTest, AverageMinMaxAndReduceScatter) {
  if (const std::string why = WhyNoGpu(); !why.empty()) GTEST_SKIP() << why;
  const int w = static_cast<int>(torch::cuda::device_count());
  testing::RunRanks(w, Factory(), [&](Backend& b) {
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kDouble}) {
      at::Tensor t = at::full({1000}, 2.0 * (b.rank() + 1), On(b, dtype));
      ASSERT_TRUE(b.AllReduce(t, ReduceOp::kAverage)->Wait().ok());
      EXPECT_TRUE(
          at::allclose(t.to(at::kFloat).cpu(), at::full({1000}, w + 1.0)));
    }
    at::Tensor m = at::full({8}, b.rank(), On(b, at::kInt));
    ASSERT_TRUE(b.AllReduce(m, ReduceOp::kMax)->Wait().ok());
    EXPECT_TRUE(at::equal(m.cpu(), at::full({8}, w - 1, at::kInt)));
    // inputs[r] = rank + r: rank r's output is sum over ranks of (k + r).
    std::vector<at::Tensor> inputs;
    for (int r = 0; r < w; ++r) {
      inputs.push_back(at::full({5}, b.rank() + r, On(b, at::kFloat)));
    }
    at::Tensor out = at::empty({5}, On(b, at::kFloat));
    ASSERT_TRUE(b.ReduceScatter(out, inputs)->Wait().ok());
    const double want = w * (w - 1) / 2.0 + w * b.rank();
    EXPECT_TRUE(at::equal(out.cpu(), at::full({5}, want)));
    // Average is refused for integers with the same words as Gloo's.
    absl::Status s = b.AllReduce(m, ReduceOp::kAverage)->Wait();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  });
}

// A sharded optimizer's collectives on one flat tensor, each rank's share
// back to back: reduce-scatter into the rank's own share and allgather from
// it, both in place (NCCL's in-place forms, no staging copy), and out of
// place from back-to-back inputs.
TEST(NcclBackendTest, ReduceScatterAndAllGatherInPlace) {
  if (const std::string why = WhyNoGpu(); !why.empty()) GTEST_SKIP() << why;
  const int w = static_cast<int>(torch::cuda::device_count());
  testing::RunRanks(w, Factory(), [&](Backend& b) {
    const int me = b.rank();
    for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{(1 << 16) + 3}}) {
      at::Tensor flat = at::arange(w * n, On(b, at::kFloat)) + me;
      std::vector<at::Tensor> shares;
      for (int r = 0; r < w; ++r) shares.push_back(flat.narrow(0, r * n, n));
      const at::Tensor sums =
          (at::arange(w * n, at::kFloat) * w + w * (w - 1) / 2.0f);
      at::Tensor out = at::empty({n}, On(b, at::kFloat));
      ASSERT_TRUE(b.ReduceScatter(out, shares)->Wait().ok());
      EXPECT_TRUE(at::equal(out.cpu(), sums.narrow(0, me * n, n)));
      ASSERT_TRUE(b.ReduceScatter(shares[me], shares)->Wait().ok());
      EXPECT_TRUE(at::equal(shares[me].cpu(), sums.narrow(0, me * n, n)));
      // Every rank's reduced share gathered back in place: the full sums.
      ASSERT_TRUE(b.AllGather(shares, shares[me])->Wait().ok());
      EXPECT_TRUE(at::equal(flat.cpu(), sums)) << "n=" << n;
    }
  });
}

TEST(NcclBackendTest, WaitLeavesTheHostFreeAndBarrierBlocksIt) {
  if (const std::string why = WhyNoGpu(); !why.empty()) GTEST_SKIP() << why;
  const int w = static_cast<int>(torch::cuda::device_count());
  testing::RunRanks(w, Factory(), [&](Backend& b) {
    // Kernels queued after Wait on the current stream see the result.
    at::Tensor t = at::ones({1 << 22}, On(b, at::kFloat));
    ASSERT_TRUE(b.AllReduce(t)->Wait().ok());
    at::Tensor doubled = t * 2;
    EXPECT_EQ(doubled.sum().item<double>(), 2.0 * w * (1 << 22));
    std::shared_ptr<Work> barrier = b.Barrier();
    ASSERT_TRUE(barrier->Wait().ok());
    EXPECT_TRUE(barrier->IsCompleted());  // Barrier's Wait waited on the host.
  });
}

TEST(NcclBackendTest, MissingPeerTimesOutAbortsAndBreaksTheBackend) {
  if (const std::string why = WhyNoGpu(2); !why.empty()) GTEST_SKIP() << why;
  testing::Notification rank0_done;
  testing::RunRanks(2, Factory(absl::Seconds(3)), [&](Backend& b) {
    if (b.rank() == 1) {
      // Never issues the collective; stays until rank 0 has seen the timeout.
      ASSERT_TRUE(rank0_done.WaitForNotificationWithTimeout(absl::Minutes(2)));
      return;
    }
    at::Tensor t = at::ones({16}, On(b, at::kFloat));
    std::shared_ptr<Work> work = b.AllReduce(t, ReduceOp::kSum, "bucket 0");
    const absl::Status s = Finished(*work);
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("[rank 0] nccl allreduce #1 (sum, 16 x float32"));
    EXPECT_THAT(std::string(s.message()), HasSubstr("bucket 0"));
    EXPECT_THAT(std::string(s.message()), HasSubstr("timed out after"));
    const absl::Status later = b.AllReduce(t)->Wait();
    EXPECT_THAT(std::string(later.message()), HasSubstr("#2"));
    EXPECT_THAT(std::string(later.message()), HasSubstr("not run"));
    rank0_done.Notify();
  });
}

// The defect this guards: destroying a backend with a collective in flight
// waited for the whole timeout (30 minutes here) instead of aborting.
TEST(NcclBackendTest, DestroyingWithACollectiveInFlightAborts) {
  if (const std::string why = WhyNoGpu(2); !why.empty()) GTEST_SKIP() << why;
  auto store = std::make_shared<store::HashStore>(absl::Seconds(60));
  const testing::BackendFactory factory = Factory(absl::Minutes(30));
  absl::StatusOr<std::unique_ptr<Backend>> b1;
  std::thread peer([&] { b1 = factory(1, 2, store); });
  absl::StatusOr<std::unique_ptr<Backend>> b0 = factory(0, 2, store);
  peer.join();
  ASSERT_TRUE(b0.ok()) << b0.status();
  ASSERT_TRUE(b1.ok()) << b1.status();
  // Rank 1 never issues it.
  std::shared_ptr<Work> in_flight =
      (*b0)->AllReduce(at::ones({16}, On(**b0, at::kFloat)));
  b0->reset();
  ASSERT_TRUE(in_flight->IsCompleted());
  EXPECT_EQ(in_flight->status().code(), absl::StatusCode::kAborted)
      << in_flight->status();
  EXPECT_THAT(std::string(in_flight->status().message()),
              HasSubstr("was still running when the backend was destroyed"));
  b1->reset();
}

}  // namespace
}  // namespace dtrain::backend
