#include "dist/launch/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/machine_limits.h"
#include "base/posix_io.h"
#include "base/process_liveness.h"
#include "base/status_macros.h"
#include "dist/launch/spawn.h"

namespace dtrain::launch {
namespace {

using internal::ElasticDir;
using internal::GroupEnv;
using internal::JobStoreToken;
using internal::ReservePort;
using internal::Spawn;

// Written by the signal handler, read by the loop: the first SIGINT/SIGTERM,
// and a byte on the pipe to wake poll() for every signal (SIGCHLD included).
volatile sig_atomic_t g_stop_signal = 0;
int g_wake_write = -1;

void OnSignal(int sig) {
  if (sig != SIGCHLD && g_stop_signal == 0) g_stop_signal = sig;
  const int saved = errno;
  if (g_wake_write >= 0) (void)!::write(g_wake_write, "x", 1);
  errno = saved;
}

// The signal handler's self-pipe.
class Pipe {
 public:
  Pipe() { ok_ = ::pipe2(fds_, O_CLOEXEC | O_NONBLOCK) == 0; }
  ~Pipe() {
    if (ok_) {
      ::close(fds_[0]);
      ::close(fds_[1]);
    }
  }
  bool ok() const { return ok_; }
  int read_fd() const { return fds_[0]; }
  int write_fd() const { return fds_[1]; }

 private:
  int fds_[2] = {-1, -1};
  bool ok_ = false;
};

// Installs the handlers for the lifetime of the object and restores the
// previous ones after.
class SignalScope {
 public:
  explicit SignalScope(int wake_write) {
    g_stop_signal = 0;
    g_wake_write = wake_write;
    struct sigaction sa = {};
    sa.sa_handler = OnSignal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (int i = 0; i < 3; ++i) sigaction(kSignals[i], &sa, &old_[i]);
  }
  ~SignalScope() {
    for (int i = 0; i < 3; ++i) sigaction(kSignals[i], &old_[i], nullptr);
    g_wake_write = -1;
  }

 private:
  static constexpr int kSignals[3] = {SIGINT, SIGTERM, SIGCHLD};
  struct sigaction old_[3];
};

struct Rank {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = -1;
  bool running = false;
  int status = 0;
  bool killed = false;  // SIGKILL sent on its own (it was stopped).
  // Since when it has been seen stopped without a break; InfiniteFuture when
  // it is not stopped.
  absl::Time stopped_since = absl::InfiniteFuture();

  std::string Name() const {
    return absl::StrCat("rank ", rank, " (local rank ", local_rank, ", pid ",
                        pid, ")");
  }
};

std::string DescribeStatus(int status) {
  if (WIFEXITED(status))
    return absl::StrCat("exited with code ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return absl::StrCat("was killed by signal ", WTERMSIG(status), " (",
                        strsignal(WTERMSIG(status)), ")");
  }
  return absl::StrCat("ended with status ", status);
}

bool Failed(int status) {
  return !WIFEXITED(status) || WEXITSTATUS(status) != 0;
}

void SignalGroup(const std::vector<Rank>& ranks, int sig) {
  for (const Rank& r : ranks) {
    if (r.running) ::killpg(r.pid, sig);
  }
}

}  // namespace

absl::Status ValidateLaunchOptions(const LaunchOptions& o) {
  if (o.command.empty()) {
    return absl::InvalidArgumentError(
        "no program to launch: give it after the flags, e.g. "
        "launch --nproc_per_node=2 -- ./train --epochs=1");
  }
  if (o.nproc_per_node < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--nproc_per_node=", o.nproc_per_node, " must be at least 1"));
  }
  // Each rank is a process on this machine: 1,000 of them ran it out of
  // memory (issue #29).
  DTRAIN_RETURN_IF_ERROR(base::CheckAtMost("--nproc_per_node", o.nproc_per_node,
                                           base::LocalProcessLimit()));
  if (o.nnodes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--nnodes=", o.nnodes, " must be at least 1"));
  }
  const base::Limit world = base::WorldSizeLimit();
  DTRAIN_RETURN_IF_ERROR(base::CheckAtMost("--nnodes", o.nnodes, world));
  // As int64: the product of two ints may not fit an int.
  const int64_t world_size =
      int64_t{o.nproc_per_node} * std::max(o.nnodes, o.max_nnodes);
  if (world_size > world.max) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--nproc_per_node=", o.nproc_per_node, " x --nnodes=", o.nnodes, " = ",
        world_size, " ranks: at most ", world.max, " (", world.why, ")"));
  }
  if (o.max_nnodes != 0 && o.max_nnodes < o.nnodes) {
    return absl::InvalidArgumentError(
        absl::StrCat("--nnodes=", o.nnodes, ":", o.max_nnodes,
                     ": the maximum is below the minimum"));
  }
  if (o.max_nnodes > o.nnodes && !o.elastic) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--nnodes=", o.nnodes, ":", o.max_nnodes,
        " (a range) needs --elastic: only an elastic job admits nodes while it "
        "runs"));
  }
  DTRAIN_RETURN_IF_ERROR(base::CheckAtMost("--nnodes", o.max_nnodes, world));
  const int nodes = std::max(o.nnodes, o.max_nnodes);
  if (o.node_rank < 0 || o.node_rank >= nodes) {
    return absl::InvalidArgumentError(
        o.max_nnodes > o.nnodes
            ? absl::StrCat("--node_rank=", o.node_rank, " is outside [0, ",
                           nodes, "), the maximum of --nnodes=", o.nnodes, ":",
                           o.max_nnodes)
            : absl::StrCat("--node_rank=", o.node_rank,
                           " is outside [0, --nnodes=", o.nnodes, ")"));
  }
  if (o.master_port < 0 || o.master_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--master_port=", o.master_port,
                     " is outside 0..65535 (0: a free port, on one node)"));
  }
  if (o.master_port == 0 && std::max(o.nnodes, o.max_nnodes) > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--master_port=0 (a free port) works on one node only: the "
        "launchers of the other ",
        std::max(o.nnodes, o.max_nnodes) - 1,
        " node(s) cannot learn the port this one picks; give every node "
        "the same fixed --master_port"));
  }
  if (o.master_addr.empty())
    return absl::InvalidArgumentError("--master_addr is empty");
  if (o.max_restarts < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_restarts=", o.max_restarts, " must not be negative"));
  }
  for (const auto& [flag, d] : {std::pair<const char*, absl::Duration>{
                                    "failure_grace", o.failure_grace},
                                {"stop_timeout", o.stop_timeout}}) {
    if (d < absl::ZeroDuration()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", flag, "=", absl::FormatDuration(d), " must not be negative"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<LaunchResult> Run(const LaunchOptions& options,
                                 std::ostream& log) {
  DTRAIN_RETURN_IF_ERROR(ValidateLaunchOptions(options));
  // `o` is what the ranks get: with the port picked for master_port 0, which
  // `reserved` holds until the end.
  LaunchOptions o = options;
  base::UniqueFd reserved;
  if (o.master_port == 0) {
    DTRAIN_ASSIGN_OR_RETURN(reserved,
                            ReservePort(o.master_addr, &o.master_port));
  }
  Pipe wake;
  if (!wake.ok())
    return absl::InternalError(absl::StrCat("pipe: ", base::ErrnoText(errno)));
  const int pipe_fds[2] = {wake.read_fd(), wake.write_fd()};
  SignalScope signals(
      wake.write_fd());  // Destroyed before the pipe it writes to.
  GroupEnv group;
  DTRAIN_ASSIGN_OR_RETURN(group.store_token, JobStoreToken(o));
  ElasticDir elastic_dir;
  if (o.elastic) {
    DTRAIN_RETURN_IF_ERROR(elastic_dir.Make());
    group.elastic_dir = elastic_dir.path();
  }
  LaunchResult result;
  result.master_port = o.master_port;
  const int world_size = o.nproc_per_node * o.nnodes;
  for (int attempt = 0;; ++attempt) {
    std::vector<Rank> ranks(o.nproc_per_node);
    for (int i = 0; i < o.nproc_per_node; ++i) {
      ranks[i].local_rank = i;
      ranks[i].rank = o.node_rank * o.nproc_per_node + i;
    }
    // A node beyond the ones the job started with joins it.
    const bool joining = o.node_rank >= o.nnodes;
    log << "[launch] starting "
        << (joining ? absl::StrCat(ranks.size(),
                                   " rank(s) that join the running job")
                    : absl::StrCat("ranks ", ranks.front().rank, "-",
                                   ranks.back().rank, " of ", world_size))
        << " (node " << o.node_rank << " of " << o.nnodes
        << (o.max_nnodes > o.nnodes ? absl::StrCat(" to ", o.max_nnodes) : "")
        << ", master " << o.master_addr << ":" << o.master_port
        << (options.master_port == 0 ? ", a free port" : "") << ")"
        << (attempt > 0
                ? absl::StrCat(", restart ", attempt, " of ", o.max_restarts)
                : "")
        << ": " << absl::StrJoin(o.command, " ") << std::endl;
    for (Rank& r : ranks) {
      absl::StatusOr<pid_t> pid =
          Spawn(o, r.rank, r.local_rank, attempt, group, joining);
      if (!pid.ok()) {
        SignalGroup(ranks, SIGKILL);
        for (Rank& q : ranks) {
          if (q.running) ::waitpid(q.pid, nullptr, 0);
        }
        return pid.status();
      }
      r.pid = *pid;
      r.running = true;
    }

    std::string failure;            // The first rank failure of this attempt.
    std::vector<std::string> lost;  // --elastic: the ranks that failed.
    int stop_signal = 0;            // A SIGINT/SIGTERM received and forwarded.
    std::string finished;           // The first rank that exited 0.
    int succeeded = 0;              // How many exited 0.
    absl::Time kill_at = absl::InfiniteFuture();
    int running = static_cast<int>(ranks.size());
    while (running > 0) {
      pollfd p{pipe_fds[0], POLLIN, 0};
      ::poll(&p, 1, 100);
      char drain[64];
      while (::read(pipe_fds[0], drain, sizeof(drain)) > 0) {
      }
      for (Rank& r : ranks) {
        if (!r.running || ::waitpid(r.pid, &r.status, WNOHANG) != r.pid)
          continue;
        r.running = false;
        --running;
        // Anything the rank left in its process group goes with it.
        ::killpg(r.pid, SIGKILL);
        if (!Failed(r.status)) {
          ++succeeded;
          if (finished.empty()) finished = r.Name();
        }
        if (Failed(r.status) && o.elastic && stop_signal == 0 && !r.killed) {
          lost.push_back(absl::StrCat(r.Name(), " ", DescribeStatus(r.status)));
          log << "[launch] " << lost.back()
              << (running > 0 ? "; the others go on (elastic)" : "")
              << std::endl;
          // A replacement joins the job while it runs: not once a rank has
          // finished, which means the job is ending.
          if (result.restarts < o.max_restarts && running > 0 &&
              finished.empty()) {
            ++result.restarts;
            absl::StatusOr<pid_t> pid =
                Spawn(o, r.rank, r.local_rank, result.restarts, group,
                      /*joiner=*/true);
            if (pid.ok()) {
              r.pid = *pid;
              r.running = true;
              r.status = 0;
              r.stopped_since = absl::InfiniteFuture();
              ++running;
              log << "[launch] started " << r.Name() << " to replace it ("
                  << result.restarts << " of " << o.max_restarts
                  << "); it joins the running job" << std::endl;
            } else {
              log << "[launch] cannot start a replacement: "
                  << pid.status().message() << std::endl;
            }
          }
          continue;
        }
        if (Failed(r.status) && failure.empty() && stop_signal == 0) {
          failure = absl::StrCat(r.Name(), " ", DescribeStatus(r.status));
          log << "[launch] " << failure;
          if (running > 0) {
            log << "; stopping the other ranks";
            SignalGroup(ranks, SIGTERM);
            kill_at = absl::Now() + o.failure_grace;
          }
          log << std::endl;
        }
      }
      if (!finished.empty() && failure.empty() && stop_signal == 0) {
        // Nothing else would end a rank stopped (SIGSTOP) once its peers have
        // finished: no collective is left to time out. One that stays stopped
        // for the grace period has failed the job.
        const absl::Time now = absl::Now();
        for (Rank& r : ranks) {
          if (!r.running) continue;
          if (!base::ProcessStopped(r.pid)) {
            r.stopped_since = absl::InfiniteFuture();
            continue;
          }
          if (r.stopped_since == absl::InfiniteFuture()) r.stopped_since = now;
          if (now - r.stopped_since < o.failure_grace || !failure.empty())
            continue;
          failure = absl::StrCat(r.Name(), " stayed stopped (SIGSTOP?) for ",
                                 absl::FormatDuration(o.failure_grace),
                                 " after ", finished, " exited with code 0");
          log << "[launch] " << failure << "; killing it" << std::endl;
          ::killpg(r.pid, SIGKILL);
          r.killed = true;
          kill_at = now + o.failure_grace;
        }
      }
      if (g_stop_signal != 0 && stop_signal == 0) {
        stop_signal = g_stop_signal;
        log << "[launch] received " << strsignal(stop_signal)
            << "; forwarding it to " << running << " rank(s)" << std::endl;
        SignalGroup(ranks, stop_signal);
        kill_at = std::min(kill_at, absl::Now() + o.stop_timeout);
      }
      if (kill_at != absl::InfiniteFuture()) {
        // A stopped rank would sit out the grace period without acting on
        // the SIGTERM: kill it now.
        for (Rank& r : ranks) {
          if (r.running && !r.killed && base::ProcessStopped(r.pid)) {
            log << "[launch] " << r.Name()
                << " is stopped (SIGSTOP?) and cannot exit; killing it"
                << std::endl;
            ::killpg(r.pid, SIGKILL);
            r.killed = true;
          }
        }
      }
      if (running > 0 && absl::Now() >= kill_at) {
        log << "[launch] " << running << " rank(s) still running "
            << absl::FormatDuration(failure.empty() ? o.stop_timeout
                                                    : o.failure_grace)
            << " after being asked to stop; killing them" << std::endl;
        SignalGroup(ranks, SIGKILL);
        kill_at = absl::InfiniteFuture();
      }
    }

    if (stop_signal != 0) {
      result.exit_code = 128 + stop_signal;
      result.summary = absl::StrCat("stopped by ", strsignal(stop_signal));
      break;
    }
    if (failure.empty() && !lost.empty()) {
      // Elastic: what matters is that the ranks left finished.
      const bool any = !finished.empty();
      result.exit_code = any ? 0 : 1;
      result.summary = absl::StrCat(
          any ? absl::StrCat(succeeded,
                             " rank(s) exited with code 0 after losing ")
              : "every rank failed: ",
          absl::StrJoin(lost, "; "),
          result.restarts > 0
              ? absl::StrCat(" (", result.restarts, " replaced)")
              : "");
      if (!any) log << "[launch] " << result.summary << std::endl;
      break;
    }
    if (failure.empty()) {
      result.exit_code = 0;
      result.summary =
          absl::StrCat("all ", ranks.size(), " rank(s) exited with code 0");
      break;
    }
    // An elastic group replaces ranks one by one (above), never as a whole.
    if (attempt >= o.max_restarts || o.elastic) {
      result.exit_code = 1;
      result.summary = o.max_restarts > 0 && !o.elastic
                           ? absl::StrCat(failure, " (after ", attempt,
                                          " restart(s), the limit)")
                           : failure;
      break;
    }
    ++result.restarts;
    log << "[launch] restarting the group (" << result.restarts << " of "
        << o.max_restarts << ")" << std::endl;
  }
  // A failure was logged when it happened; only what is new is said here.
  if (result.exit_code != 1) {
    log << "[launch] " << result.summary << std::endl;
  } else if (o.max_restarts > 0) {
    log << "[launch] giving up after " << result.restarts
        << " restart(s), the limit" << std::endl;
  }
  return result;
}

}  // namespace dtrain::launch
