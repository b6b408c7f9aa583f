// The NCCL backend in real processes, as train runs it: each process makes
// its device current, meets the others through a file store, and runs the
// scenario: averaging; a peer SIGKILLed mid-run (the survivor fails naming
// it, never hangs); a peer that never issues the collective (the timeout
// ends it); a backend destroyed with a collective in flight (aborted within
// the grace); and two ranks refused for sharing one GPU.
//
// With two or more GPUs each rank has its own (and no process may leave a
// context on the other's). With one, both ranks share it as a one-GPU
// machine allows: DTRAIN_NCCL_SHARE_GPU=1, each rank a host of its own to
// NCCL, talking over sockets.
//
// The parent never calls CUDA (a child forked after CUDA started cannot use
// it): the children find out whether GPUs exist and exit with kSkip codes
// when not, and the test then skips with the reason.

#include <ATen/ATen.h>
#include <signal.h>
#include <sys/wait.h>
#include <torch/cuda.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/cuda_device.h"
#include "dist/backend/nccl/nccl_backend.h"
#include "dist/store/file_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::backend {
namespace {

using ::testing::HasSubstr;

constexpr int kWorld = 2;
constexpr int kNoGpu = 77;
constexpr int kNoCudaLibTorch = 78;
constexpr int kCouldNotStart = 4;
constexpr int kWrong = 5;
constexpr int kNoError = 3;

enum class Scenario {
  kAllReduce,
  kKillRank1,
  kAbsentPeer,
  kDestroyInFlight,
  kSharedGpuRefused
};

std::string Path(absl::string_view name) {
  return absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
}

void Report(int rank, const std::string& text) {
  std::ofstream(Path(absl::StrCat("rank", rank, ".txt"))) << text;
}

std::string ReadReport(int rank) {
  std::ifstream in(Path(absl::StrCat("rank", rank, ".txt")));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Waits on the host until `work` completed (Wait only orders the stream).
absl::Status Finished(Work& work) {
  while (!work.IsCompleted()) absl::SleepFor(absl::Milliseconds(1));
  return work.status();
}

[[noreturn]] void RunRank(int rank, Scenario scenario,
                          const std::string& store_path) {
  alarm(120);  // Never outlive a broken test.
  absl::StatusOr<int> devices = base::CudaDeviceCount();
  if (!devices.ok() || *devices < 1) {
    Report(rank, devices.ok() ? "no CUDA device visible"
                              : std::string(devices.status().message()));
    _exit(kNoGpu);
  }
  if (!torch::cuda::is_available()) _exit(kNoCudaLibTorch);
  const bool share =
      *devices < kWorld || scenario == Scenario::kSharedGpuRefused;
  const int device = share ? 0 : rank;
  if (share && scenario != Scenario::kSharedGpuRefused) {
    ::setenv("DTRAIN_NCCL_SHARE_GPU", "1", 1);
  }
  // As train does: the device first, before any context exists.
  absl::Status s = base::SetCurrentCudaDevice(device);
  auto store = store::FileStore::Open(store_path, kWorld, absl::Seconds(60));
  Membership group;
  group.rank = rank;
  group.world_size = kWorld;
  group.timeout = scenario == Scenario::kDestroyInFlight ? absl::Minutes(30)
                                                         : absl::Seconds(10);
  if (s.ok() && store.ok()) group.store = *store;
  NcclBackendOptions o;
  o.device = device;
  absl::StatusOr<std::unique_ptr<Backend>> backend =
      s.ok() && store.ok() ? CreateNcclBackend(group, o)
                           : absl::StatusOr<std::unique_ptr<Backend>>(
                                 s.ok() ? store.status() : s);
  if (!backend.ok()) {
    Report(rank, std::string(backend.status().message()));
    _exit(kCouldNotStart);
  }
  if (scenario == Scenario::kSharedGpuRefused) {
    Report(rank, "created a backend on a shared GPU");
    _exit(kWrong);
  }
  Backend& b = **backend;
  const at::TensorOptions on =
      at::TensorOptions(at::kFloat)
          .device(at::kCUDA, static_cast<c10::DeviceIndex>(device));
  // The other rank's "done" file: kAbsentPeer's rank 1 stays until rank 0
  // has seen its timeout.
  const std::string done0 = Path("rank0.done");
  switch (scenario) {
    case Scenario::kAllReduce: {
      for (int step = 0; step < 20; ++step) {
        at::Tensor t = at::full({1 << 20}, rank + 1.0, on);
        absl::Status w = b.AllReduce(t, ReduceOp::kAverage)->Wait();
        if (!w.ok() || !at::equal(t.cpu(), at::full({1 << 20}, 1.5))) {
          Report(rank, absl::StrCat("step ", step, ": ", w.ToString()));
          _exit(kWrong);
        }
      }
      absl::Status w = b.Barrier()->Wait();
      backend->reset();
      // The watchdog thread and the destructor ran on this rank's device
      // only.
      const int other = 1 - rank;
      if (!w.ok() || (!share && base::HasPrimaryContext(other) != false)) {
        Report(rank, absl::StrCat("barrier: ", w.ToString(),
                                  "; context on cuda:", other, ": ",
                                  base::HasPrimaryContext(other).value_or(-1)));
        _exit(kWrong);
      }
      _exit(0);
    }
    case Scenario::kKillRank1:
      // Rank 1 dies mid-run; rank 0 must see an error, not hang.
      for (int step = 0; step < 100000; ++step) {
        if (rank == 1 && step == 3) raise(SIGKILL);
        at::Tensor t = at::ones({1 << 16}, on);
        absl::Status w = Finished(*b.AllReduce(t));
        if (!w.ok()) {
          Report(rank, std::string(w.message()));
          _exit(0);
        }
      }
      _exit(kNoError);
    case Scenario::kAbsentPeer: {
      if (rank == 1) {
        // Alive, never issuing; waits for rank 0's verdict.
        while (access(done0.c_str(), F_OK) != 0)
          absl::SleepFor(absl::Milliseconds(10));
        _exit(0);
      }
      at::Tensor t = at::ones({16}, on);
      const absl::Status first =
          Finished(*b.AllReduce(t, ReduceOp::kSum, "bucket 0"));
      const absl::Status later = b.AllReduce(t)->Wait();
      Report(rank, absl::StrCat(first.ToString(), "\n", later.ToString()));
      std::ofstream(done0) << "done";
      _exit(first.ok() ? kNoError : 0);
    }
    case Scenario::kDestroyInFlight: {
      if (rank == 1) {
        while (access(done0.c_str(), F_OK) != 0)
          absl::SleepFor(absl::Milliseconds(10));
        _exit(0);
      }
      std::shared_ptr<Work> in_flight = b.AllReduce(at::ones({16}, on));
      const absl::Time start = absl::Now();
      backend->reset();
      Report(rank,
             absl::StrCat(in_flight->IsCompleted() ? "completed" : "open",
                          " after ", absl::ToDoubleSeconds(absl::Now() - start),
                          "s: ", in_flight->status().ToString()));
      std::ofstream(done0) << "done";
      _exit(0);
    }
    case Scenario::kSharedGpuRefused:
      break;
  }
  _exit(kWrong);
}

struct Outcome {
  int status[kWorld] = {-1, -1};
  std::string report[kWorld];
  bool skipped = false;
  std::string why;
};

Outcome RunScenario(Scenario scenario, absl::string_view name) {
  const std::string store_path = Path(absl::StrCat(name, ".store"));
  std::remove(store_path.c_str());
  std::remove(Path("rank0.done").c_str());
  for (int rank = 0; rank < kWorld; ++rank)
    std::remove(Path(absl::StrCat("rank", rank, ".txt")).c_str());
  pid_t pids[kWorld];
  for (int rank = 0; rank < kWorld; ++rank) {
    pids[rank] = fork();
    if (pids[rank] == 0) RunRank(rank, scenario, store_path);
  }
  Outcome out;
  for (int rank = 0; rank < kWorld; ++rank) {
    int status = 0;
    waitpid(pids[rank], &status, 0);
    out.status[rank] =
        WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    out.report[rank] = ReadReport(rank);
    if (out.status[rank] == kNoGpu) {
      out.skipped = true;
      out.why = "needs a CUDA device: " + out.report[rank];
    } else if (out.status[rank] == kNoCudaLibTorch) {
      out.skipped = true;
      out.why = "this LibTorch has no CUDA (set LIBTORCH_HOME to a CUDA build)";
    }
  }
  return out;
}

TEST(NcclMultiProcessTest, RanksAverageOnTheirOwnDevicesOnly) {
  const Outcome out = RunScenario(Scenario::kAllReduce, "allreduce");
  if (out.skipped) GTEST_SKIP() << out.why;
  for (int rank = 0; rank < kWorld; ++rank) {
    EXPECT_EQ(out.status[rank], 0)
        << "rank " << rank << ": " << out.report[rank];
  }
}

TEST(NcclMultiProcessTest, KilledPeerEndsTheSurvivorWithinTheTimeout) {
  const absl::Time start = absl::Now();
  const Outcome out = RunScenario(Scenario::kKillRank1, "kill");
  if (out.skipped) GTEST_SKIP() << out.why;
  EXPECT_EQ(out.status[1], 128 + SIGKILL);
  ASSERT_EQ(out.status[0], 0) << out.report[0];
  EXPECT_THAT(out.report[0], HasSubstr("[rank 0] nccl allreduce #"));
  // NCCL does not say which peer; the backend does, for peers on its host.
  EXPECT_THAT(out.report[0], HasSubstr("rank 1 (pid "));
  // Either NCCL noticed the lost peer or the 10 s timeout fired; not a hang
  // (the children's alarm would end them at 120 s).
  EXPECT_LT(absl::Now() - start, absl::Seconds(100));
}

// The defect this guards: a collective's first run connected to its peers
// under the watchdog's lock (NCCL 2.22+), so an absent peer hung it or failed
// it "to start" instead of timing out as a collective.
TEST(NcclMultiProcessTest, AbsentPeerTimesOutAbortsAndBreaksTheBackend) {
  const absl::Time start = absl::Now();
  const Outcome out = RunScenario(Scenario::kAbsentPeer, "absent");
  if (out.skipped) GTEST_SKIP() << out.why;
  ASSERT_EQ(out.status[0], 0) << out.report[0];
  EXPECT_EQ(out.status[1], 0) << out.report[1];
  EXPECT_THAT(out.report[0],
              HasSubstr("DEADLINE_EXCEEDED: [rank 0] nccl allreduce #1 (sum, "
                        "16 x float32"));
  EXPECT_THAT(out.report[0], HasSubstr("bucket 0"));
  EXPECT_THAT(out.report[0], HasSubstr("timed out after"));
  EXPECT_THAT(out.report[0], HasSubstr("#2"));
  EXPECT_THAT(out.report[0], HasSubstr("not run"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(60));
}

// The defect this guards: destroying a backend with a collective in flight
// waited for the whole timeout (30 minutes here) instead of aborting.
TEST(NcclMultiProcessTest, DestroyingWithACollectiveInFlightAborts) {
  const absl::Time start = absl::Now();
  const Outcome out = RunScenario(Scenario::kDestroyInFlight, "destroy");
  if (out.skipped) GTEST_SKIP() << out.why;
  ASSERT_EQ(out.status[0], 0) << out.report[0];
  EXPECT_THAT(out.report[0], HasSubstr("completed after "));
  EXPECT_THAT(out.report[0], HasSubstr("ABORTED: [rank 0] nccl allreduce #1"));
  EXPECT_THAT(out.report[0],
              HasSubstr("was still running when the backend was destroyed"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(60));
}

TEST(NcclMultiProcessTest, RanksSharingAGpuAreRefusedNamingBoth) {
  const Outcome out = RunScenario(Scenario::kSharedGpuRefused, "shared");
  if (out.skipped) GTEST_SKIP() << out.why;
  for (int rank = 0; rank < kWorld; ++rank) {
    EXPECT_EQ(out.status[rank], kCouldNotStart) << out.report[rank];
    EXPECT_THAT(out.report[rank],
                HasSubstr(absl::StrCat("[rank ", rank,
                                       "] nccl: ranks 0 and 1 would share one "
                                       "GPU (PCI ")));
  }
}

}  // namespace
}  // namespace dtrain::backend
