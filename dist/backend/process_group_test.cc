// InitProcessGroup: ranks as threads meeting through a file, a single process
// with no launcher, the device chosen after the rendezvous, and errors passed
// on.
#include "dist/backend/process_group.h"

#include <ATen/ATen.h>
#include <torch/cuda.h>

#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::backend {
namespace {

using ::testing::HasSubstr;

TEST(ProcessGroupTest, RanksMeetAndReduce) {
  const std::string path =
      absl::StrCat(std::getenv("TEST_TMPDIR"), "/process_group_store");
  constexpr int kRanks = 2;
  std::vector<absl::Status> results(kRanks, absl::UnknownError("not run"));
  std::vector<double> sums(kRanks, 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      ProcessGroupOptions options;
      options.init.url = absl::StrCat("file://", path);
      options.init.args.rank = r;
      options.init.args.world_size = kRanks;
      options.init.timeout = absl::Seconds(30);
      options.backend.shm = false;  // Gloo over TCP between the threads
      options.backend.gloo_hostname = "127.0.0.1";
      options.timeout = absl::Seconds(30);
      absl::StatusOr<ProcessGroup> group =
          InitProcessGroup(options, rendezvous::EnvMap{});
      results[r] = group.status();
      if (!group.ok()) return;
      EXPECT_EQ(group->rank(), r);
      EXPECT_EQ(group->size(), kRanks);
      EXPECT_EQ(group->backend->rank(), r);
      EXPECT_EQ(group->backend->name(), "gloo");
      EXPECT_EQ(group->cuda_device, -1);
      at::Tensor t = at::full({3}, r + 1.0);
      results[r] = group->backend->AllReduce(t)->Wait(absl::Seconds(30));
      sums[r] = t.sum().item<double>();
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
    EXPECT_EQ(sums[r], 9.0) << "rank " << r;  // 3 x (1 + 2)
  }
}

TEST(ProcessGroupTest, WithoutALauncherAProcessIsRankZeroOfOne) {
  absl::StatusOr<ProcessGroup> group =
      InitProcessGroup({}, rendezvous::EnvMap{});
  ASSERT_TRUE(group.ok()) << group.status();
  EXPECT_EQ(group->rank(), 0);
  EXPECT_EQ(group->size(), 1);
  ASSERT_NE(group->backend, nullptr);
  EXPECT_EQ(group->backend->size(), 1);
  EXPECT_EQ(group->cuda_device, -1);  // "cpu" by default
}

TEST(ProcessGroupTest, TheCallbackSeesTheWorldBeforeTheBackend) {
  ProcessGroupOptions options;
  options.backend.name = "mpi";
  int calls = 0;
  options.on_rendezvous = [&](const rendezvous::World&) { ++calls; };
  // Refused before the ranks meet.
  EXPECT_FALSE(InitProcessGroup(options, rendezvous::EnvMap{}).ok());
  EXPECT_EQ(calls, 0);

  options.backend.name = "shm";
  options.on_rendezvous = [&](const rendezvous::World& world) {
    ++calls;
    EXPECT_EQ(world.world_size, 1);
    EXPECT_NE(world.store, nullptr);
  };
  absl::StatusOr<ProcessGroup> group =
      InitProcessGroup(options, rendezvous::EnvMap{});
  ASSERT_TRUE(group.ok()) << group.status();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(group->backend->name(), "shm");
}

// "cuda" where LibTorch has no CUDA (this machine, unless it has a GPU) fails
// after the rendezvous, naming the rank and what to do.
TEST(ProcessGroupTest, CudaWithoutAUsableDeviceSaysWhy) {
  if (torch::cuda::is_available()) {
    GTEST_SKIP() << "LibTorch sees a CUDA device here";
  }
  for (const char* device : {"cuda", "cuda:0"}) {
    for (const char* backend : {"gloo", "nccl"}) {
      ProcessGroupOptions options;
      options.backend.name = backend;
      options.device = device;
      bool met = false;
      options.on_rendezvous = [&](const rendezvous::World&) { met = true; };
      absl::StatusOr<ProcessGroup> group =
          InitProcessGroup(options, rendezvous::EnvMap{});
      EXPECT_TRUE(met);
      EXPECT_EQ(group.status().code(), absl::StatusCode::kFailedPrecondition)
          << group.status();
      EXPECT_THAT(std::string(group.status().message()),
                  HasSubstr(absl::StrCat("[rank 0] --device=", device,
                                         ": no CUDA device is usable")));
      EXPECT_THAT(std::string(group.status().message()),
                  HasSubstr("--device=cpu --dist_backend=gloo"));
    }
  }
}

TEST(ProcessGroupTest, BadDevicesAreRefusedBeforeTheRanksMeet) {
  ProcessGroupOptions options;
  bool met = false;
  options.on_rendezvous = [&](const rendezvous::World&) { met = true; };
  options.device = "gpu";
  absl::StatusOr<ProcessGroup> group =
      InitProcessGroup(options, rendezvous::EnvMap{});
  EXPECT_EQ(group.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(group.status().message()),
              HasSubstr("--device: 'gpu' is not cpu, cuda or cuda:N"));

  // NCCL runs on a GPU: it needs one named.
  options.device = "cpu";
  options.backend.name = "nccl";
  group = InitProcessGroup(options, rendezvous::EnvMap{});
  EXPECT_EQ(group.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(group.status().message()),
              HasSubstr("the nccl backend runs on a CUDA device"));
  EXPECT_FALSE(met);
}

TEST(ProcessGroupTest, ErrorsComeBackAsTheyAre) {
  ProcessGroupOptions options;
  options.backend.name = "mpi";
  absl::StatusOr<ProcessGroup> group =
      InitProcessGroup(options, rendezvous::EnvMap{});
  EXPECT_EQ(group.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(group.status().message()), HasSubstr("gloo"));

  options.backend.name = "gloo";
  options.init.url = "udp://nowhere";
  group = InitProcessGroup(options, rendezvous::EnvMap{});
  EXPECT_EQ(group.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(group.status().message()), HasSubstr("udp://"));
}

// Errors after the rendezvous name the rank, once: the backend's own start
// with it already.
TEST(ProcessGroupTest, BackendErrorsNameTheRankOnce) {
  ProcessGroupOptions options;
  options.backend.shm = false;
  options.backend.gloo_iface = "no-such-interface0";
  options.timeout = absl::Seconds(5);
  absl::StatusOr<ProcessGroup> group =
      InitProcessGroup(options, rendezvous::EnvMap{});
  ASSERT_FALSE(group.ok());
  const std::string message(group.status().message());
  EXPECT_THAT(message, ::testing::StartsWith("[rank 0] gloo: "));
  EXPECT_THAT(message, ::testing::Not(HasSubstr("[rank 0] [rank 0]")));
}

}  // namespace
}  // namespace dtrain::backend
