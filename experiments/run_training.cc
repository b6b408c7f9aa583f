#include "experiments/run_training.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "base/atomic_file.h"
#include "base/posix_io.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"

namespace dtrain::experiments {
namespace {

// A port the kernel just had free; the launcher's store binds it moments
// later.
int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 29500;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = 29500;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

std::string Tail(const std::string& path, int lines) {
  absl::StatusOr<std::string> text = base::ReadFile(path, base::kTextFileLimit);
  if (!text.ok()) return std::string(text.status().message());
  std::vector<std::string> all = absl::StrSplit(*text, '\n');
  if (!all.empty() && all.back().empty()) all.pop_back();
  const size_t from = all.size() > static_cast<size_t>(lines)
                          ? all.size() - static_cast<size_t>(lines)
                          : 0;
  return absl::StrJoin(all.begin() + from, all.end(), "\n");
}

std::string DescribeExit(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exit ", WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return absl::StrCat("killed by signal ", WTERMSIG(status));
  return "ended";
}

// `word` as one shell word, whatever it holds.
std::string ShellQuote(const std::string& word) {
  return absl::StrCat("'", absl::StrReplaceAll(word, {{"'", "'\\''"}}), "'");
}

// Runs `command` through the shell, its standard output into *out; the wait
// status, or -1 when it could not start.
int ReadCommand(const std::string& command, std::string* out) {
  out->clear();
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return -1;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0;)
    out->append(buffer, n);
  return ::pclose(pipe);
}

}  // namespace

std::vector<std::string> TrainingCommand(const RunConfig& c, const Programs& p,
                                         int node_rank,
                                         const std::string& metrics_path,
                                         int master_port) {
  std::vector<std::string> cmd = {
      p.launch, absl::StrCat("--nproc_per_node=", c.ProcessesPerNode())};
  if (c.nnodes > 1) {
    cmd.push_back(absl::StrCat("--nnodes=", c.nnodes));
    cmd.push_back(absl::StrCat("--node_rank=", node_rank));
    cmd.push_back(absl::StrCat("--master_addr=", c.master_addr));
  }
  cmd.push_back(absl::StrCat("--master_port=", master_port));
  // A run that hangs is stopped by the runner; ranks get 10 s to leave.
  cmd.push_back("--stop_timeout=10s");
  cmd.push_back("--");
  if (c.implementation == "pytorch") {
    cmd.push_back(p.python);
    cmd.push_back(p.reference_script);
  } else {
    cmd.push_back(p.train);
  }
  for (std::string arg : {
           absl::StrCat("--model=", c.model),
           absl::StrCat("--batch_size=", c.batch_size),
           absl::StrCat("--epochs=", c.epochs),
           absl::StrCat("--max_steps=", c.max_steps),
           absl::StrCat("--dist_backend=",
                        c.backend == "gloo+shm" ? "gloo" : c.backend),
           absl::StrCat("--device=", c.backend == "nccl" ? "cuda" : "cpu"),
           absl::StrCat("--sync_gradients=",
                        c.sync_gradients ? "true" : "false"),
           metrics_path.empty() ? std::string()
                                : absl::StrCat("--metrics_json=", metrics_path),
           std::string("--skip_validation"),
           std::string("--progress=none"),
           std::string("--timeout=120s"),
       }) {
    if (!arg.empty()) cmd.push_back(arg);
  }
  if (c.train_limit > 0)
    cmd.push_back(absl::StrCat("--train_limit=", c.train_limit));
  // ResNet-18 on Fashion-MNIST's 28-pixel images: the small-image stem.
  if (c.model == "resnet18") cmd.push_back("--small_input_stem");
  // The sweep's "gloo" is Gloo over TCP, as PyTorch's; "gloo+shm" train's
  // default.
  if (c.implementation != "pytorch" && c.backend == "gloo")
    cmd.push_back("--shm=false");
  // Both trainers take the same hook flag and knobs.
  if (c.comm_hook != kDefaultCommHook)
    cmd.push_back(absl::StrCat("--comm_hook=", c.comm_hook));
  if (c.zero > 0) cmd.push_back(absl::StrCat("--zero=", c.zero));
  cmd.insert(cmd.end(), c.train_flags.begin(), c.train_flags.end());
  return cmd;
}

absl::Status ReadMetrics(const std::string& path, RunRecord* r) {
  absl::StatusOr<std::string> text = base::ReadFile(path, base::kTextFileLimit);
  if (absl::IsNotFound(text.status()))
    return absl::NotFoundError(absl::StrCat("no metrics file ", path));
  DTRAIN_RETURN_IF_ERROR(text.status());
  try {
    const nlohmann::json m = nlohmann::json::parse(*text);
    if (m.value("format", "") != "dtrain.metrics.v1") {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": not a dtrain.metrics.v1 file"));
    }
    r->startup_seconds = m.value("startup_seconds", 0.0);
    r->epoch_seconds = r->exposed_communication_seconds = r->data_seconds = 0;
    r->samples = r->steps = 0;
    r->step_histogram.clear();
    r->step_seconds_sum = 0;
    for (const nlohmann::json& e : m.at("epochs")) {
      r->epoch_seconds += e.at("epoch_seconds").get<double>();
      r->samples += e.at("samples").get<int64_t>();
      r->steps += e.at("steps").get<int64_t>();
      r->exposed_communication_seconds +=
          e.at("exposed_communication_seconds").get<double>();
      r->data_seconds += e.at("data_seconds").get<double>();
      // The last epoch's percentiles (most runs have one epoch).
      r->step_seconds_p50 = e.at("step_seconds_p50").get<double>();
      r->step_seconds_p90 = e.at("step_seconds_p90").get<double>();
      if (e.contains("step_seconds_histogram")) {
        const nlohmann::json& h = e.at("step_seconds_histogram");
        const auto counts = h.at("counts").get<std::vector<int64_t>>();
        if (r->step_histogram.empty())
          r->step_histogram.assign(counts.size(), 0);
        for (size_t i = 0; i < counts.size() && i < r->step_histogram.size();
             ++i)
          r->step_histogram[i] += counts[i];
        r->step_seconds_sum += h.at("sum").get<double>();
      }
    }
    if (r->steps == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": the run took no step"));
    }
    r->samples_per_second =
        r->epoch_seconds > 0 ? r->samples / r->epoch_seconds : 0;
    auto largest = [&m](const char* key) -> int64_t {
      int64_t most = 0;
      if (m.contains(key)) {
        for (const nlohmann::json& v : m.at(key))
          most = std::max(most, v.get<int64_t>());
      }
      return most;
    };
    r->optimizer_state_bytes = largest("optimizer_state_bytes");
    r->peak_rss_bytes = largest("peak_rss_bytes");
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": unreadable metrics: ", e.what()));
  }
  return absl::OkStatus();
}

absl::StatusOr<RunRecord> RunTraining(
    const RunConfig& config, const Programs& programs, int node_rank,
    const std::string& dir, absl::Duration timeout,
    const std::function<void(absl::Duration)>& tick) {
  // Rank 0, which writes the metrics, runs on node 0.
  const bool measures = node_rank == 0;
  for (const std::string& sub :
       {dir, dir + "/logs", dir + "/runs", dir + "/traces"}) {
    if (!measures && sub == dir + "/runs") continue;
    if (!config.trace && config.instrumentation != "trace" &&
        sub == dir + "/traces") {
      continue;
    }
    if (::mkdir(sub.c_str(), 0755) != 0 && errno != EEXIST) {
      return absl::InternalError(
          absl::StrCat("cannot create ", sub, ": ", base::ErrnoText(errno)));
    }
  }
  RunRecord r;
  r.config = config;
  r.log_path = absl::StrCat(dir, "/logs/", config.Slug(), ".log");
  if (measures) {
    r.metrics_path = absl::StrCat(dir, "/runs/", config.Slug(), ".json");
    ::unlink(r.metrics_path.c_str());
  }
  std::vector<std::string> cmd = TrainingCommand(
      config, programs, node_rank, r.metrics_path,
      config.master_port != 0 ? config.master_port : FreePort());
  // Every rank records; rank 0 (node 0) writes the file. The trace variant
  // traces every step (after --train_flags: the last --trace_steps counts).
  if (config.trace || config.instrumentation == "trace") {
    cmd.push_back(
        absl::StrCat("--trace=", dir, "/traces/", config.Slug(), ".json"));
  }
  if (config.instrumentation == "trace")
    cmd.push_back("--trace_steps=1:1000000000");
  if (config.instrumentation == "no_flight_recorder")
    cmd.push_back("--flight_recorder=0");
  const int log = ::open(r.log_path.c_str(),
                         O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log < 0) {
    return absl::InternalError(absl::StrCat("cannot create ", r.log_path, ": ",
                                            base::ErrnoText(errno)));
  }
  const std::string header = absl::StrCat("$ ", absl::StrJoin(cmd, " "), "\n");
  if (::write(log, header.data(), header.size()) < 0) {
    // The log is for people; a failed header does not stop the run.
  }
  std::vector<char*> argv;
  for (const std::string& a : cmd) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);

  const absl::Time start = absl::Now();
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(log);
    return absl::InternalError(absl::StrCat("fork: ", base::ErrnoText(errno)));
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    // A runner stopped by a signal ends its run too (the launcher passes
    // SIGTERM on to its ranks): nothing trains on unobserved.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) _exit(127);
    ::dup2(log, STDOUT_FILENO);
    ::dup2(log, STDERR_FILENO);
    ::execv(argv[0], argv.data());
    const std::string msg = absl::StrCat("cannot run ", argv[0], ": ",
                                         base::ErrnoText(errno), "\n");
    if (::write(STDERR_FILENO, msg.data(), msg.size()) < 0) _exit(127);
    _exit(127);
  }
  ::close(log);
  ::setpgid(pid, pid);
  int status = 0;
  bool timed_out = false;
  absl::Time stop_sent = absl::InfiniteFuture();
  for (;;) {
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) {
      return absl::InternalError(
          absl::StrCat("waitpid: ", base::ErrnoText(errno)));
    }
    const absl::Time now = absl::Now();
    if (!timed_out && now - start > timeout) {
      timed_out = true;
      stop_sent = now;
      ::kill(-pid, SIGTERM);
    }
    if (timed_out && now - stop_sent > absl::Seconds(15)) ::kill(-pid, SIGKILL);
    if (tick) tick(now - start);
    absl::SleepFor(absl::Milliseconds(100));
  }
  r.wall_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  if (timed_out) {
    r.error =
        absl::StrCat("stopped after the run timeout (",
                     absl::FormatDuration(timeout), "); see ", r.log_path);
    return r;
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    r.error = absl::StrCat(DescribeExit(status), ": ", Tail(r.log_path, 3));
    return r;
  }
  if (!measures) {
    r.ok = true;
    return r;
  }
  if (absl::Status s = ReadMetrics(r.metrics_path, &r); !s.ok()) {
    r.error = std::string(s.message());
    return r;
  }
  r.ok = true;
  return r;
}

// Asked of the train binary, which runs the trainings with its LibTorch.
// (Linking LibTorch into the runner would also break prometheus-cpp's HTTP
// server: with LibTorch's libraries loaded, civetweb fails to start.)
int CountCudaDevices(const Programs& p) {
  std::string out;
  ReadCommand(
      absl::StrCat(ShellQuote(p.train), " --print_cuda_devices 2>/dev/null"),
      &out);
  int count = 0;
  const std::vector<std::string> lines = absl::StrSplit(out, '\n');
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(lines[0]), &count)) return 0;
  return count;
}

absl::StatusOr<PythonTorch> ProbePythonTorch(const Programs& p) {
  const std::string command =
      absl::StrCat(ShellQuote(p.python), " ", ShellQuote(p.reference_script),
                   " --probe 2>&1");
  std::string out;
  const int status = ReadCommand(command, &out);
  if (status != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--reference=pytorch needs Debian's python3-torch (tools/setup.sh "
        "installs it): `",
        command, "` failed (",
        status < 0 ? "did not start" : DescribeExit(status),
        "): ", absl::StripAsciiWhitespace(out)));
  }
  // Torch may warn before the answer (a CUDA build without a driver).
  std::vector<std::string> lines =
      absl::StrSplit(absl::StripTrailingAsciiWhitespace(out), '\n');
  return ParsePythonTorchProbe(lines.back());
}

absl::StatusOr<PythonTorch> ParsePythonTorchProbe(const std::string& text) {
  try {
    const nlohmann::json m = nlohmann::json::parse(text);
    PythonTorch t;
    t.version = m.at("torch").get<std::string>();
    t.cuda = !m.at("cuda").is_null();
    t.cuda_devices = m.at("cuda_devices").get<int>();
    t.nccl = m.at("nccl").get<bool>();
    // Older scripts do not say: the runs then tell.
    t.gloo_bfloat16 = m.value("gloo_bfloat16", true);
    t.gloo_float16 = m.value("gloo_float16", true);
    return t;
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("unreadable answer of pytorch_reference.py --probe: '",
                     text, "': ", e.what()));
  }
}

}  // namespace dtrain::experiments
