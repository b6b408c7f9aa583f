// ChooseCudaDevice: a rank's GPU from the device string, its placement on
// its node and the visible devices, with errors that name the numbers they
// compare; and ParseDevice.
#include "dist/backend/device_choice.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::backend {
namespace {

using ::testing::HasSubstr;

TEST(ParseDeviceTest, CpuAndCudaHaveNoIndex) {
  EXPECT_EQ(ParseDevice("cpu").value(), -1);
  EXPECT_EQ(ParseDevice("cuda").value(), -1);
  EXPECT_EQ(ParseDevice("cuda:0").value(), 0);
  EXPECT_EQ(ParseDevice("cuda:12").value(), 12);
  for (const char* bad : {"", "gpu", "cuda:", "cuda:x", "cuda:-1", "CPU"}) {
    absl::StatusOr<int> got = ParseDevice(bad);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(got.status().message(),
                HasSubstr(absl::StrCat("--device: '", bad,
                                       "' is not cpu, cuda or cuda:N")));
  }
}

RankPlacement Placement(int rank, int world_size, int local_rank,
                        int local_world_size, bool inferred = false) {
  RankPlacement p;
  p.rank = rank;
  p.world_size = world_size;
  p.local_rank = local_rank;
  p.local_world_size = local_world_size;
  p.local_inferred = inferred;
  return p;
}

// The message of a failed choice, checked for its code.
std::string ChoiceError(const std::string& device, const RankPlacement& p,
                        int visible, absl::StatusCode code) {
  absl::StatusOr<int> got = ChooseCudaDevice(device, p, visible);
  if (got.ok()) return absl::StrCat("chose cuda:", *got);
  EXPECT_EQ(got.status().code(), code) << got.status();
  return std::string(got.status().message());
}

TEST(ChooseCudaDeviceTest, CpuIsNoDevice) {
  EXPECT_EQ(ChooseCudaDevice("cpu", Placement(3, 4, 1, 2), 0).value(), -1);
  EXPECT_EQ(ChooseCudaDevice("cpu", Placement(3, 4, 1, 2), 8).value(), -1);
}

TEST(ChooseCudaDeviceTest, CudaIsTheLocalRank) {
  // The AWS tutorial: 2 nodes x 2 GPUs, rank 3 is the second on its node.
  EXPECT_EQ(ChooseCudaDevice("cuda", Placement(3, 4, 1, 2), 2).value(), 1);
  EXPECT_EQ(ChooseCudaDevice("cuda", Placement(0, 4, 0, 2), 2).value(), 0);
  // Fewer ranks than GPUs on the node.
  EXPECT_EQ(ChooseCudaDevice("cuda", Placement(1, 2, 1, 2), 8).value(), 1);
  // One node, local rank and size taken from the global ones.
  EXPECT_EQ(ChooseCudaDevice("cuda", Placement(1, 2, 1, 2, true), 2).value(),
            1);
}

TEST(ChooseCudaDeviceTest, OneVisibleDeviceIsEveryLocalRanks) {
  // srun --gpus-per-task=1: each process sees only its own GPU.
  EXPECT_EQ(ChooseCudaDevice("cuda", Placement(3, 4, 3, 4), 1).value(), 0);
  EXPECT_EQ(ChooseCudaDevice("cuda", Placement(2, 4, 2, 4, true), 1).value(),
            0);
}

TEST(ChooseCudaDeviceTest, ExplicitIndexWithinTheVisibleDevices) {
  EXPECT_EQ(ChooseCudaDevice("cuda:1", Placement(0, 2, 0, 2), 2).value(), 1);
  EXPECT_THAT(ChoiceError("cuda:2", Placement(0, 2, 0, 2), 2,
                          absl::StatusCode::kInvalidArgument),
              HasSubstr("--device=cuda:2: cuda:2 requested but 2 CUDA devices "
                        "are visible"));
}

TEST(ChooseCudaDeviceTest, LocalRankPastTheDevicesNamesBoth) {
  EXPECT_THAT(ChoiceError("cuda", Placement(2, 4, 2, 4), 2,
                          absl::StatusCode::kInvalidArgument),
              HasSubstr("--device=cuda: local rank 2 needs cuda:2 but 2 CUDA "
                        "devices are visible (local world size 4)"));
}

TEST(ChooseCudaDeviceTest, OverfullNodeFailsOnEveryRank) {
  // Local rank 0 has a device, but its node runs more ranks than GPUs.
  EXPECT_THAT(ChoiceError("cuda", Placement(0, 4, 0, 4), 2,
                          absl::StatusCode::kInvalidArgument),
              HasSubstr("--device=cuda: 4 ranks on this node (local world "
                        "size) but 2 CUDA devices are visible: start at most 2 "
                        "ranks per node"));
}

TEST(ChooseCudaDeviceTest, InferredLocalRankSaysHowToGiveOne) {
  // The tutorial's explicit form without --local_rank on 2 nodes x 2 GPUs.
  EXPECT_THAT(
      ChoiceError("cuda", Placement(2, 4, 2, 4, true), 2,
                  absl::StatusCode::kInvalidArgument),
      HasSubstr("--device=cuda: rank 2 of 4 was given no local rank (no "
                "--local_rank, no launcher variable), so it would use cuda:2, "
                "but 2 CUDA devices are visible: pass --local_rank and "
                "--local_world_size, or start the ranks with a launcher"));
  EXPECT_THAT(
      ChoiceError("cuda", Placement(0, 4, 0, 4, true), 2,
                  absl::StatusCode::kInvalidArgument),
      HasSubstr("rank 0 of 4 was given no local rank (no --local_rank, no "
                "launcher variable), so all 4 ranks are taken to run on this "
                "node, but 2 CUDA devices are visible: pass --local_rank"));
}

TEST(ChooseCudaDeviceTest, NoVisibleDevice) {
  EXPECT_THAT(ChoiceError("cuda", Placement(1, 2, 1, 2), 0,
                          absl::StatusCode::kFailedPrecondition),
              HasSubstr("--device=cuda: no CUDA device is visible to rank 1"));
  EXPECT_THAT(ChoiceError("cuda:0", Placement(0, 1, 0, 1), 0,
                          absl::StatusCode::kFailedPrecondition),
              HasSubstr("no CUDA device is visible"));
}

TEST(ChooseCudaDeviceTest, MalformedDeviceIsRefused) {
  EXPECT_THAT(ChoiceError("gpu", Placement(0, 1, 0, 1), 2,
                          absl::StatusCode::kInvalidArgument),
              HasSubstr("--device: 'gpu' is not cpu, cuda or cuda:N"));
  EXPECT_THAT(ChoiceError("cuda:-1", Placement(0, 1, 0, 1), 2,
                          absl::StatusCode::kInvalidArgument),
              HasSubstr("'cuda:-1' is not cpu, cuda or cuda:N"));
}

}  // namespace
}  // namespace dtrain::backend
