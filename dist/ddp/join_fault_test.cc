// Uneven inputs with ranks as real processes: ranks 0 and 1 run out of
// inputs after 2 steps and shadow rank 2, which is SIGKILLed in the middle
// of its 5th iteration (notified, then gone). The shadowing ranks must fail
// with an error naming themselves, the round and what they were shadowing,
// well within the timeout, never hang.

#include <ATen/ATen.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "dist/backend/gloo/gloo_backend.h"
#include "dist/ddp/ddp.h"
#include "dist/ddp/ddp_testing.h"
#include "dist/ddp/join.h"
#include "dist/store/tcp_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::ddp {
namespace {

using ::testing::HasSubstr;

constexpr int kWorld = 3;
constexpr int kVictim = 2;
constexpr absl::Duration kTimeout = absl::Seconds(5);

std::string ReportPath(int rank) {
  return absl::StrCat(getenv("TEST_TMPDIR"), "/join_rank", rank, ".txt");
}

// A rank's whole life. Exit code 0: the shadow failed as expected; 3: it
// did not; 4: could not start.
[[noreturn]] void RunRank(int rank, int port_fd) {
  alarm(120);  // Never outlive a broken test.
  int port = 0;
  ssize_t got;
  do {
    got = read(port_fd, &port, sizeof(port));
  } while (got < 0 && errno == EINTR);
  if (got != static_cast<ssize_t>(sizeof(port))) _exit(4);
  close(port_fd);
  store::TcpStoreOptions so;
  so.host = "127.0.0.1";
  so.port = port;
  auto store = store::TcpStore::Create(so);
  if (!store.ok()) _exit(4);
  backend::GlooBackendOptions o;
  o.hostname = "127.0.0.1";
  auto backend = backend::CreateGlooBackend(
      testing::Group(rank, kWorld, *store, kTimeout), o);
  if (!backend.ok()) _exit(4);
  testing::Mlp model;
  auto ddp = DistributedDataParallel::Create(model.ptr(), **backend);
  if (!ddp.ok()) _exit(4);
  auto join = Join::Create({ddp->get()}, **backend);
  if (!join.ok()) _exit(4);
  const int steps = rank == kVictim ? 50 : 2;
  for (int s = 0; s < steps; ++s) {
    if (!(*ddp)->PrepareForward().ok()) _exit(3);
    if (rank == kVictim && s == 4) raise(SIGKILL);
    testing::Loss(model->forward(testing::Input(rank))).backward();
    if (!(*ddp)->SynchronizeGradients().ok()) _exit(3);
  }
  const absl::Time start = absl::Now();
  absl::StatusOr<JoinSummary> summary = (*join)->JoinAndShadow();
  if (summary.ok()) _exit(3);
  std::ofstream(ReportPath(rank))
      << summary.status().ToString()
      << "\nseconds: " << absl::ToDoubleSeconds(absl::Now() - start) << "\n";
  _exit(0);
}

TEST(JoinFaultTest, KilledRankFailsTheShadowingRanksQuickly) {
  // Forked while this process is single-threaded (see
  // gloo_backend_fault_test.cc); the store's port goes through pipes.
  std::vector<pid_t> pids;
  std::vector<int> port_fds;
  for (int rank = 0; rank < kWorld; ++rank) {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(fds[1]);
      for (const int fd : port_fds) close(fd);
      RunRank(rank, fds[0]);
    }
    close(fds[0]);
    pids.push_back(pid);
    port_fds.push_back(fds[1]);
  }
  store::TcpStoreOptions so;
  so.host = so.bind_host = "127.0.0.1";
  so.port = 0;
  so.is_server = true;
  auto server = store::TcpStore::Create(so);
  if (server.ok()) {
    const int port = (*server)->port();
    for (const int fd : port_fds) {
      EXPECT_EQ(write(fd, &port, sizeof(port)),
                static_cast<ssize_t>(sizeof(port)));
    }
  }
  for (const int fd : port_fds) close(fd);
  if (!server.ok()) {
    for (const pid_t pid : pids) waitpid(pid, nullptr, 0);
  }
  ASSERT_TRUE(server.ok()) << server.status();
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
                HasSubstr(absl::StrCat("[rank ", rank,
                                       "] join: round 5 (rank 2 active, "
                                       "authoritative rank 2), shadowing ddp: "
                                       "[rank ",
                                       rank, "] ddp: step 5 (shadowed), ")));
  }
  EXPECT_LT(took, kTimeout + absl::Seconds(10));
}

}  // namespace
}  // namespace dtrain::ddp
