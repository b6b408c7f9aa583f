// The NCCL backend in real processes, one per GPU, as train runs it: each
// process makes its device current, meets the other through a file store,
// and trains-like allreduces; then one process is SIGKILLed and the other
// must fail naming the collective within its timeout, never hang. Also
// checks that no process leaves a context on a GPU it does not use.
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
constexpr int kFewerThanTwoGpus = 77;
constexpr int kNoCudaLibTorch = 78;
constexpr int kCouldNotStart = 4;
constexpr int kWrong = 5;
constexpr int kNoError = 3;

enum class Scenario { kAllReduce, kKillRank1 };

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
  if (!devices.ok() || *devices < kWorld) {
    Report(rank, devices.ok() ? absl::StrCat(*devices, " CUDA devices visible")
                              : std::string(devices.status().message()));
    _exit(kFewerThanTwoGpus);
  }
  if (!torch::cuda::is_available()) _exit(kNoCudaLibTorch);
  // As train does: the device first, before any context exists.
  absl::Status s = base::SetCurrentCudaDevice(rank);
  auto store = store::FileStore::Open(store_path, kWorld, absl::Seconds(60));
  NcclBackendOptions o;
  o.rank = rank;
  o.world_size = kWorld;
  o.device = rank;
  o.timeout = absl::Seconds(10);
  if (s.ok() && store.ok()) o.store = *store;
  absl::StatusOr<std::unique_ptr<Backend>> backend =
      s.ok() && store.ok() ? CreateNcclBackend(o)
                           : absl::StatusOr<std::unique_ptr<Backend>>(
                                 s.ok() ? store.status() : s);
  if (!backend.ok()) {
    Report(rank, std::string(backend.status().message()));
    _exit(kCouldNotStart);
  }
  Backend& b = **backend;
  const at::TensorOptions on =
      at::TensorOptions(at::kFloat)
          .device(at::kCUDA, static_cast<c10::DeviceIndex>(rank));
  if (scenario == Scenario::kAllReduce) {
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
    // The watchdog thread and the destructor ran on this rank's device only.
    const int other = 1 - rank;
    if (!w.ok() || base::HasPrimaryContext(other) != false) {
      Report(rank, absl::StrCat("barrier: ", w.ToString(),
                                "; context on cuda:", other, ": ",
                                base::HasPrimaryContext(other).value_or(-1)));
      _exit(kWrong);
    }
    _exit(0);
  }
  // kKillRank1: rank 1 dies mid-run; rank 0 must see an error, not hang.
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
    if (out.status[rank] == kFewerThanTwoGpus) {
      out.skipped = true;
      out.why = "needs 2 CUDA devices: " + out.report[rank];
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

}  // namespace
}  // namespace dtrain::backend
