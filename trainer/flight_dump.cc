#include "trainer/flight_dump.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <iostream>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "dist/backend/flight_recorder.h"

namespace dtrain::trainer {
namespace {

std::atomic<int> g_rank{-1};
std::atomic<int> g_world_size{0};
std::mutex g_mu;
std::string* g_dir = nullptr;  // Set once; guarded by g_mu.
int g_pipe[2] = {-1, -1};      // SIGUSR1's handler writes, the thread reads.

void OnSigusr1(int) {
  const int saved = errno;
  const char byte = 1;
  // Async-signal-safe; a full pipe already has a dump pending.
  (void)!::write(g_pipe[1], &byte, 1);
  errno = saved;
}

// Dumps with `reason`; returns what to say on stderr.
std::string Dump(const std::string& reason) {
  const backend::FlightRecorder& recorder = backend::FlightRecorder::Process();
  const size_t kept = recorder.Entries().size();
  if (kept == 0) return "";
  const int rank = g_rank.load();
  const std::string path = FlightDumpPath();
  backend::FlightDumpInfo info;
  info.rank = rank;
  info.world_size = g_world_size.load();
  info.reason = reason;
  const absl::Status s = backend::DumpFlightRecord(recorder, info, path);
  const std::string who =
      rank >= 0 ? absl::StrCat("rank ", rank) : std::string("this joiner");
  if (!s.ok()) {
    return absl::StrCat("train: writing ", who,
                        "'s flight recorder failed: ", s.message(), "\n");
  }
  return absl::StrCat("train: ", who, "'s last ", kept, " collectives are in ",
                      path, " (tools/flight_analyze reads every rank's)\n");
}

void SignalLoop(int fd) {
  char byte;
  while (true) {
    const ssize_t n = ::read(fd, &byte, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    std::cerr << Dump("SIGUSR1");
  }
}

}  // namespace

std::string FlightDumpPath() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  const int rank = g_rank.load();
  std::string dir;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    dir = g_dir != nullptr ? *g_dir : "/tmp";
  }
  return absl::StrCat(dir, "/flight_",
                      rank >= 0 ? absl::StrCat("rank", rank) : "joiner", "_",
                      host, "_", ::getpid(), ".json");
}

void InstallFlightDump(const std::string& dir) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_dir != nullptr) return;
  g_dir = new std::string(dir);
  if (::pipe2(g_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    std::cerr << "train: no SIGUSR1 flight recorder dumps: pipe: "
              << std::strerror(errno) << "\n";
    return;
  }
  // The reading end blocks; the handler's end never does.
  const int flags = ::fcntl(g_pipe[0], F_GETFL);
  ::fcntl(g_pipe[0], F_SETFL, flags & ~O_NONBLOCK);
  std::thread(SignalLoop, g_pipe[0]).detach();
  struct sigaction action = {};
  action.sa_handler = OnSigusr1;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &action, nullptr);
}

void SetFlightRank(int rank, int world_size) {
  g_rank.store(rank);
  g_world_size.store(world_size);
}

void DumpFlightRecorderOnFailure(const absl::Status& failure) {
  if (failure.ok() || absl::IsCancelled(failure)) return;
  std::cerr << Dump(absl::StrCat("failure: ", failure.message()));
}

}  // namespace dtrain::trainer
