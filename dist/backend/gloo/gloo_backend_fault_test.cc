// Real processes: three ranks allreduce over loopback, one is SIGKILLed
// mid-run, and the others must get an error that names the operation and its
// sequence number well within the timeout, never hang.

#include <ATen/ATen.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "dist/backend/gloo/gloo_backend.h"
#include "dist/rendezvous/tcp_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::backend {
namespace {

using ::testing::HasSubstr;

constexpr int kWorld = 3;
constexpr int kVictim = 2;
constexpr absl::Duration kTimeout = absl::Seconds(5);

std::string ReportPath(int rank) {
  return absl::StrCat(getenv("TEST_TMPDIR"), "/rank", rank, ".txt");
}

// A rank's whole life: connect, allreduce until an error (or die, for the
// victim). Exit code 0 means "saw the error", 3 means "no error after many
// steps", 4 means "could not start".
[[noreturn]] void RunRank(int rank, int port) {
  alarm(120);  // Never outlive a broken test.
  rendezvous::TcpStoreOptions so;
  so.host = "127.0.0.1";
  so.port = port;
  auto store = rendezvous::TcpStore::Create(so);
  if (!store.ok()) _exit(4);
  GlooBackendOptions o;
  o.rank = rank;
  o.world_size = kWorld;
  o.store = *store;
  o.hostname = "127.0.0.1";
  o.timeout = kTimeout;
  auto backend = CreateGlooBackend(o);
  if (!backend.ok()) _exit(4);
  at::Tensor t = at::ones({1 << 16});
  for (int step = 0; step < 100000; ++step) {
    if (rank == kVictim && step == 5) raise(SIGKILL);
    const absl::Time start = absl::Now();
    absl::Status s = (*backend)->AllReduce(t)->Wait();
    if (!s.ok()) {
      std::ofstream(ReportPath(rank))
          << s.ToString()
          << "\nseconds: " << absl::ToDoubleSeconds(absl::Now() - start)
          << "\n";
      backend->reset();
      _exit(0);
    }
    t.fill_(1);
  }
  _exit(3);
}

TEST(GlooBackendFaultTest, KilledRankFailsTheOthersQuicklyWithANamedOperation) {
  rendezvous::TcpStoreOptions so;
  so.host = so.bind_host = "127.0.0.1";
  so.port = 0;
  so.is_server = true;
  auto server = rendezvous::TcpStore::Create(so);
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<pid_t> pids;
  for (int rank = 0; rank < kWorld; ++rank) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) RunRank(rank, (*server)->port());
    pids.push_back(pid);
  }
  const absl::Time start = absl::Now();
  std::vector<int> status(kWorld, -1);
  for (int rank = 0; rank < kWorld; ++rank) {
    ASSERT_EQ(waitpid(pids[rank], &status[rank], 0), pids[rank]);
  }
  const absl::Duration took = absl::Now() - start;
  EXPECT_TRUE(WIFSIGNALED(status[kVictim]) &&
              WTERMSIG(status[kVictim]) == SIGKILL);
  for (int rank = 0; rank < kWorld; ++rank) {
    if (rank == kVictim) continue;
    EXPECT_TRUE(WIFEXITED(status[rank]) && WEXITSTATUS(status[rank]) == 0)
        << "rank " << rank << " status " << status[rank];
    std::ifstream in(ReportPath(rank));
    std::stringstream report;
    report << in.rdbuf();
    std::printf("rank %d reported: %s", rank, report.str().c_str());
    EXPECT_THAT(report.str(),
                HasSubstr(absl::StrCat("[rank ", rank, "] gloo allreduce #")));
    EXPECT_THAT(report.str(), HasSubstr("failed after"));
  }
  // Ranks whose collective reads from the victim see its connection close at
  // once; others may only fail when their collective times out. Either way,
  // within the timeout (plus start-up and scheduling slack).
  EXPECT_LT(took, kTimeout + absl::Seconds(10));
}

}  // namespace
}  // namespace dtrain::backend
