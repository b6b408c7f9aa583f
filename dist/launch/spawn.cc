#include "dist/launch/spawn.h"

#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

extern char** environ;

namespace dtrain::launch::internal {
namespace {

// The environment of one rank: ours, with the launcher's variables set.
// `joiner`: a replacement, which joins the running job.
std::vector<std::string> RankEnvironment(const LaunchOptions& o, int rank,
                                         int local_rank, int restart,
                                         const GroupEnv& group, bool joiner) {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq != nullptr) env[std::string(*e, eq - *e)] = eq + 1;
  }
  env["RANK"] = std::to_string(rank);
  env["LOCAL_RANK"] = std::to_string(local_rank);
  env["WORLD_SIZE"] = std::to_string(o.nproc_per_node * o.nnodes);
  env["LOCAL_WORLD_SIZE"] = std::to_string(o.nproc_per_node);
  env["GROUP_RANK"] = std::to_string(o.node_rank);
  env["MASTER_ADDR"] = o.master_addr;
  env["MASTER_PORT"] = std::to_string(o.master_port);
  env["DTRAIN_RESTART_COUNT"] = std::to_string(restart);
  if (!group.store_token.empty()) env["DTRAIN_STORE_TOKEN"] = group.store_token;
  if (!group.elastic_dir.empty()) env["DTRAIN_ELASTIC_DIR"] = group.elastic_dir;
  if (o.max_nnodes > o.nnodes) {
    env["DTRAIN_ELASTIC_MIN_RANKS"] =
        std::to_string(o.nproc_per_node * o.nnodes);
    env["DTRAIN_ELASTIC_MAX_RANKS"] =
        std::to_string(o.nproc_per_node * o.max_nnodes);
  }
  if (joiner) env["DTRAIN_ELASTIC_JOIN"] = "1";
  // Several ranks on few cores oversubscribe with one OpenMP thread pool per
  // core each; OpenBLAS (Debian's LibTorch) has a pool of its own whose idle
  // workers spin, and it sizes the pool from this variable when loaded.
  env.emplace("OMP_NUM_THREADS", "1");
  env.emplace("OPENBLAS_NUM_THREADS", "1");
  std::vector<std::string> out;
  for (const auto& [k, v] : env) out.push_back(absl::StrCat(k, "=", v));
  return out;
}

}  // namespace

absl::StatusOr<std::string> JobStoreToken(const LaunchOptions& o) {
  if (o.nnodes != 1 || o.max_nnodes > 1 ||
      std::getenv("DTRAIN_STORE_TOKEN") != nullptr ||
      std::getenv("DTRAIN_STORE_TOKEN_FILE") != nullptr) {
    return std::string();
  }
  char bytes[16];
  if (::getrandom(bytes, sizeof(bytes), 0) != sizeof(bytes)) {
    return base::ErrnoStatus(errno, "cannot make the job's store token");
  }
  return absl::BytesToHexString(absl::string_view(bytes, sizeof(bytes)));
}

absl::StatusOr<pid_t> Spawn(const LaunchOptions& o, int rank, int local_rank,
                            int restart, const GroupEnv& group, bool joiner) {
  std::vector<std::string> env_strings =
      RankEnvironment(o, rank, local_rank, restart, group, joiner);
  std::vector<char*> envp;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = o.command;
  std::vector<char*> argv;
  for (std::string& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  const std::string failed_exec = absl::StrCat(
      "[launch] rank ", rank, ": cannot run '", o.command[0], "': ");
  const pid_t parent = ::getpid();
  // Signals stay blocked across fork until the child has reset the launcher's
  // handlers, so that a SIGTERM arriving in that window takes its default
  // effect instead of running our handler there.
  sigset_t block, saved;
  sigemptyset(&block);
  sigaddset(&block, SIGINT);
  sigaddset(&block, SIGTERM);
  sigaddset(&block, SIGCHLD);
  ::sigprocmask(SIG_BLOCK, &block, &saved);
  const pid_t pid = ::fork();
  if (pid != 0) ::sigprocmask(SIG_SETMASK, &saved, nullptr);
  if (pid < 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("fork for rank ", rank, ": ", base::ErrnoText(errno)));
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent)
      ::_exit(127);  // The launcher died before prctl took effect.
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGCHLD, SIG_DFL);
    ::sigprocmask(SIG_SETMASK, &saved, nullptr);
    ::execvpe(argv[0], argv.data(), envp.data());
    const std::string message = failed_exec + base::ErrnoText(errno) + "\n";
    (void)!::write(STDERR_FILENO, message.data(), message.size());
    ::_exit(127);
  }
  ::setpgid(pid,
            pid);  // Also here, so that killpg works even before the child ran.
  return pid;
}

absl::StatusOr<base::UniqueFd> ReservePort(const std::string& host, int* port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), "0", &hints, &found);
  if (rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("--master_port=0: cannot resolve --master_addr=", host,
                     ": ", gai_strerror(rc)));
  }
  std::string error = "no usable address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    base::UniqueFd fd(
        ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    int one = 1;
    if (!fd.valid() ||
        ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) !=
            0 ||
        ::bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0) {
      error = base::ErrnoText(errno);
      continue;
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof(bound);
    if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &len) !=
        0) {
      error = base::ErrnoText(errno);
      continue;
    }
    *port = bound.ss_family == AF_INET6
                ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    ::freeaddrinfo(found);
    return fd;
  }
  ::freeaddrinfo(found);
  return absl::UnavailableError(absl::StrCat(
      "--master_port=0: cannot find a free port on ", host,
      " (--master_addr must be an address of this machine): ", error));
}

ElasticDir::~ElasticDir() {
  if (path_.empty()) return;
  if (DIR* d = ::opendir(path_.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") ::unlink((path_ + "/" + name).c_str());
    }
    ::closedir(d);
  }
  ::rmdir(path_.c_str());
}

absl::Status ElasticDir::Make() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = absl::StrCat(
      tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/dtrain-elastic-XXXXXX");
  if (::mkdtemp(pattern.data()) == nullptr) {
    return base::ErrnoStatus(
        errno, absl::StrCat("--elastic: cannot make a folder like ", pattern,
                            " for the job's store addresses"));
  }
  path_ = pattern;
  return absl::OkStatus();
}

}  // namespace dtrain::launch::internal
