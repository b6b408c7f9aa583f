// InitProcessGroup: ranks as threads meeting through a file, a single process
// with no launcher, and errors passed on.
#include "dist/backend/process_group.h"

#include <ATen/ATen.h>

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

}  // namespace
}  // namespace dtrain::backend
