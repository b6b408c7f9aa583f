#include "bench/forked_ranks.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "dist/store/tcp_store.h"

namespace dtrain::bench {
namespace {

// A forked rank: waits for the store's port on `port_fd`, runs, and exits
// without returning (0: done and correct, 1: failed, 4: no port).
[[noreturn]] void RankProcess(const std::string& name, int rank, int port_fd,
                              const RankMain& rank_main) {
  // Die with the driver: a killed driver must not leave ranks behind.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  int port = 0;
  ssize_t got;
  do {
    got = read(port_fd, &port, sizeof(port));
  } while (got < 0 && errno == EINTR);
  close(port_fd);
  // A short read: the driver closed the pipe without a port (its server
  // failed, and it says so).
  if (got != static_cast<ssize_t>(sizeof(port))) _exit(4);
  int code = 0;
  {
    absl::Status s = rank_main(rank, port);
    if (!s.ok()) {
      std::fprintf(stderr, "%s: [rank %d] %s\n", name.c_str(), rank,
                   s.ToString().c_str());
      code = 1;
    }
  }
  std::fflush(stdout);
  std::fflush(stderr);
  // _exit: the static state forked from the driver is the driver's to
  // destroy.
  _exit(code);
}

// After one rank fails, how long the others get to notice (a backend fails
// its collectives within a second once a peer has exited) and say why
// themselves, before they are killed.
constexpr absl::Duration kGrace = absl::Seconds(5);

// Waits for every rank (pids[r] is rank r); once one fails, kills those still
// running after kGrace (they might otherwise wait for it until the timeout).
// Returns how many failed.
int WaitForRanks(const std::string& name, const std::vector<pid_t>& pids) {
  std::vector<bool> running(pids.size(), true);
  size_t left = pids.size();
  int failed = 0;
  absl::Time kill_at = absl::InfiniteFuture();
  bool killed = false;
  while (left > 0) {
    int status = 0;
    // Blocks until the first failure (no wakeups to disturb the timing),
    // then polls for the grace period.
    const pid_t pid =
        waitpid(-1, &status, kill_at == absl::InfiniteFuture() ? 0 : WNOHANG);
    if (pid < 0 && errno != EINTR) break;
    if (pid <= 0) {
      if (!killed && absl::Now() >= kill_at) {
        for (size_t r = 0; r < pids.size(); ++r) {
          if (running[r]) kill(pids[r], SIGKILL);
        }
        std::fprintf(stderr,
                     "%s: killed the ranks still running %s after "
                     "the first failure\n",
                     name.c_str(), absl::FormatDuration(kGrace).c_str());
        killed = true;
      }
      absl::SleepFor(absl::Milliseconds(10));
      continue;
    }
    const size_t rank = std::find(pids.begin(), pids.end(), pid) - pids.begin();
    if (rank == pids.size()) continue;
    running[rank] = false;
    --left;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
    ++failed;
    kill_at = std::min(kill_at, absl::Now() + kGrace);
    if (WIFSIGNALED(status) && !killed) {
      std::fprintf(stderr, "%s: rank %zu (pid %d) was killed by signal %d\n",
                   name.c_str(), rank, pid, WTERMSIG(status));
    }
  }
  return failed;
}

}  // namespace

int RunForkedRanks(absl::string_view name, int processes,
                   absl::Duration timeout, const RankMain& rank_main) {
  const std::string who(name);
  // Fork the ranks while this process is single-threaded (no LibTorch work,
  // no store server yet): a child of a multi-threaded process may find a lock
  // held forever by a thread that did not come along.
  std::fflush(stdout);
  std::vector<pid_t> pids;
  std::vector<int> port_fds;
  for (int rank = 0; rank < processes; ++rank) {
    int fds[2];
    if (pipe(fds) != 0) {
      std::perror((who + ": pipe").c_str());
      for (const int fd : port_fds) close(fd);
      WaitForRanks(who, pids);
      return 1;
    }
    const pid_t pid = fork();
    if (pid == 0) {
      close(fds[1]);
      for (const int fd : port_fds) close(fd);
      RankProcess(who, rank, fds[0], rank_main);
    }
    close(fds[0]);
    if (pid < 0) {
      std::perror((who + ": fork").c_str());
      close(fds[1]);
      for (const int fd : port_fds) close(fd);
      WaitForRanks(who, pids);
      return 1;
    }
    pids.push_back(pid);
    port_fds.push_back(fds[1]);
  }
  store::TcpStoreOptions so;
  so.host = so.bind_host = "127.0.0.1";
  so.port = 0;
  so.is_server = true;
  so.timeout = timeout;
  absl::StatusOr<std::shared_ptr<store::TcpStore>> server =
      store::TcpStore::Create(so);
  if (server.ok()) {
    const int port = (*server)->port();
    for (const int fd : port_fds) {
      if (write(fd, &port, sizeof(port)) !=
          static_cast<ssize_t>(sizeof(port))) {
        std::perror((who + ": write").c_str());
      }
    }
  } else {
    std::fprintf(stderr, "%s: cannot serve the store: %s\n", who.c_str(),
                 server.status().ToString().c_str());
  }
  // Without a port, the ranks read end of file and exit.
  for (const int fd : port_fds) close(fd);
  const int failed = WaitForRanks(who, pids);
  return server.ok() && failed == 0 ? 0 : 1;
}

}  // namespace dtrain::bench
