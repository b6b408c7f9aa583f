// The shared-memory backend in real processes: three ranks allreduce
// through a file store's rendezvous (an ordinary tensor, or one from
// AllocateBuffer that every rank maps: the zero-copy path), checking each
// result; one is SIGKILLed, or stopped with SIGSTOP, mid-run. The others must
// fail naming it, the killed one within a fraction of the timeout (its exit is
// seen while waiting), the stopped one at the timeout; nobody hangs.

#include <ATen/ATen.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "dist/backend/shm/shm_backend.h"
#include "dist/store/file_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::backend {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;

constexpr int kWorld = 3;
constexpr int kVictim = 2;

std::string Path(absl::string_view name) {
  return absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Exit 0: saw an error (written to the report); 3: never did; 4: no start;
// 5: a wrong result.
[[noreturn]] void RunRank(int rank, absl::string_view scenario,
                          absl::Duration timeout, int ready_fd) {
  alarm(120);  // Never outlive a broken test.
  auto store = store::FileStore::Open(Path(absl::StrCat(scenario, ".store")),
                                      kWorld, absl::Seconds(60));
  if (!store.ok()) _exit(4);
  Membership group;
  group.rank = rank;
  group.world_size = kWorld;
  group.store = *store;
  group.timeout = timeout;
  ShmBackendOptions o;
  o.slot_bytes = 4096;
  absl::StatusOr<std::unique_ptr<Backend>> b = CreateShmBackend(group, o);
  if (!b.ok()) {
    std::ofstream(Path(absl::StrCat(scenario, rank))) << b.status();
    _exit(4);
  }
  if (rank == kVictim) {
    const char byte = 1;
    if (write(ready_fd, &byte, 1) != 1) _exit(4);
  }
  at::Tensor t = at::ones({3000});
  if (absl::StrContains(scenario, "buffer")) {
    absl::StatusOr<at::Tensor> buffer = (*b)->AllocateBuffer(3000, at::kFloat);
    if (!buffer.ok()) {
      std::ofstream(Path(absl::StrCat(scenario, rank))) << buffer.status();
      _exit(4);
    }
    t = *buffer;
  }
  for (int step = 0; step < 1000000; ++step) {
    if (absl::StartsWith(scenario, "kill") && rank == kVictim && step == 20) {
      raise(SIGKILL);
    }
    t.fill_(rank + 1);
    absl::Status s = (*b)->AllReduce(t)->Wait();
    if (!s.ok()) {
      std::ofstream(Path(absl::StrCat(scenario, rank))) << s.message();
      _exit(0);
    }
    if (!at::equal(t, at::full({3000}, kWorld * (kWorld + 1) / 2.0f))) _exit(5);
  }
  _exit(3);
}

struct Outcome {
  int status[kWorld];
  std::string report[kWorld];
  absl::Duration elapsed;
};

Outcome RunScenario(absl::string_view scenario, absl::Duration timeout) {
  int ready[2];
  EXPECT_EQ(pipe(ready), 0);
  pid_t pids[kWorld];
  const absl::Time start = absl::Now();
  for (int r = 0; r < kWorld; ++r) {
    pids[r] = fork();
    if (pids[r] == 0) RunRank(r, scenario, timeout, ready[1]);
  }
  close(ready[1]);
  if (scenario == "stop") {
    char byte;
    EXPECT_EQ(read(ready[0], &byte, 1), 1);  // The victim has joined.
    absl::SleepFor(absl::Milliseconds(100));
    kill(pids[kVictim], SIGSTOP);
  }
  close(ready[0]);
  Outcome out;
  for (int r = 0; r < kWorld; ++r) {
    if (scenario == "stop" && r == kVictim) continue;
    int status = 0;
    waitpid(pids[r], &status, 0);
    out.status[r] =
        WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    out.report[r] = ReadFile(Path(absl::StrCat(scenario, r)));
  }
  out.elapsed = absl::Now() - start;
  if (scenario == "stop") {
    kill(pids[kVictim], SIGKILL);
    int status = 0;
    waitpid(pids[kVictim], &status, 0);
    out.status[kVictim] = 128 + SIGKILL;
  }
  return out;
}

void ExpectKilledRankNamed(absl::string_view scenario) {
  const Outcome out = RunScenario(scenario, absl::Seconds(60));
  EXPECT_EQ(out.status[kVictim], 128 + SIGKILL);
  for (int r = 0; r < kWorld; ++r) {
    if (r == kVictim) continue;
    EXPECT_EQ(out.status[r], 0) << "rank " << r << ": " << out.report[r];
    EXPECT_THAT(out.report[r],
                HasSubstr(absl::StrCat("[rank ", r, "] shm allreduce #")));
    EXPECT_THAT(out.report[r],
                AnyOf(HasSubstr("rank 2 (pid "), HasSubstr("gave up")));
  }
  EXPECT_LT(out.elapsed, absl::Seconds(30)) << "waited for the timeout";
}

TEST(ShmFaultTest, KilledRankIsNamedWithinAFractionOfTheTimeout) {
  ExpectKilledRankNamed("kill");
}

// The zero-copy path: the survivors keep reading the dead rank's buffer,
// which their mappings keep alive, and learn of its exit at the barrier.
TEST(ShmFaultTest, KilledRankInABufferAllReduceIsNamed) {
  ExpectKilledRankNamed("kill_buffer");
}

TEST(ShmFaultTest, StoppedRankIsNamedAtTheTimeout) {
  const Outcome out = RunScenario("stop", absl::Seconds(2));
  for (int r = 0; r < kWorld; ++r) {
    if (r == kVictim) continue;
    EXPECT_EQ(out.status[r], 0) << "rank " << r << ": " << out.report[r];
    EXPECT_THAT(out.report[r], AnyOf(HasSubstr("rank 2 has not arrived"),
                                     HasSubstr("gave up")));
  }
}

}  // namespace
}  // namespace dtrain::backend
