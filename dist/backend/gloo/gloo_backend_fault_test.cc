// Real processes: three ranks allreduce over loopback, one is SIGKILLed
// mid-run, and the others must get an error that names the operation and its
// sequence number well within the timeout, never hang.

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
#include "dist/store/tcp_store.h"
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

// A rank's whole life: learn the store's port from the parent, connect,
// allreduce until an error (or die, for the victim). Exit code 0 means "saw
// the error", 3 means "no error after many steps", 4 means "could not start".
[[noreturn]] void RunRank(int rank, int port_fd) {
  alarm(120);  // Never outlive a broken test.
  int port = 0;
  ssize_t got;
  do {
    got = read(port_fd, &port, sizeof(port));
  } while (got < 0 && errno == EINTR);
  // Short read: the parent closed the pipe without a port (its server failed).
  if (got != static_cast<ssize_t>(sizeof(port))) _exit(4);
  close(port_fd);
  store::TcpStoreOptions so;
  so.host = "127.0.0.1";
  so.port = port;
  auto store = store::TcpStore::Create(so);
  if (!store.ok()) _exit(4);
  Membership group;
  group.rank = rank;
  group.world_size = kWorld;
  group.store = *store;
  group.timeout = kTimeout;
  GlooBackendOptions o;
  o.hostname = "127.0.0.1";
  auto backend = CreateGlooBackend(group, o);
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
  // Fork the ranks while this process is still single-threaded, and only then
  // start the store server (which runs threads) and hand its port to the ranks
  // through pipes. A child forked from a multi-threaded parent may only make
  // async-signal-safe calls until it execs (another thread may have held a
  // lock, malloc's included, at the fork), and ThreadSanitizer refuses to start
  // threads in one; the ranks start LibTorch and Gloo threads.
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
  // Without a server, the ranks read end of file and exit.
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
