#include "base/machine_limits.h"

#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace dtrain::base {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

// A small /proc or /sys file; empty when unreadable.
std::string ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "";
  std::ostringstream out;
  out << in.rdbuf();
  return out.str().substr(0, 4096);
}

int64_t ReadInt64File(const std::string& path) {
  int64_t value = -1;
  const std::string text = ReadSmallFile(path);
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &value)) return -1;
  return value;
}

// This process's cgroup memory limit (v2, then v1); -1 for none.
int64_t CgroupMemoryLimit() {
  std::istringstream lines(ReadSmallFile("/proc/self/cgroup"));
  for (std::string line; std::getline(lines, line);) {
    if (!absl::StartsWith(line, "0::")) continue;
    const int64_t v2 = internal::ParseCgroupMemoryLimit(ReadSmallFile(
        absl::StrCat("/sys/fs/cgroup", line.substr(3), "/memory.max")));
    if (v2 > 0) return v2;
  }
  return internal::ParseCgroupMemoryLimit(
      ReadSmallFile("/sys/fs/cgroup/memory/memory.limit_in_bytes"));
}

std::string FormatGiB(int64_t bytes) {
  return absl::StrFormat("%.1f GiB", static_cast<double>(bytes) / kGiB);
}

struct Machine {
  int cores = 1;
  int64_t memory = kGiB;
  std::string memory_why;
  Limit processes;
};

Machine ReadMachine() {
  Machine m;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) {
    m.cores = std::max(1, CPU_COUNT(&set));
  } else {
    m.cores =
        std::max<int>(1, static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN)));
  }

  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) {
    m.memory = static_cast<int64_t>(pages) * page;
    m.memory_why = absl::StrCat("this machine's memory, ", FormatGiB(m.memory));
  } else {
    m.memory_why = "1 GiB: this machine's memory could not be read";
  }
  const int64_t cgroup = CgroupMemoryLimit();
  if (cgroup > 0 && cgroup < m.memory) {
    m.memory = cgroup;
    m.memory_why =
        absl::StrCat("this process's cgroup memory limit, ", FormatGiB(cgroup));
  }

  // Linux's own ceiling on pid_max when unreadable.
  m.processes = {int64_t{1} << 22, "Linux's largest pid_max"};
  const int64_t pid_max = ReadInt64File("/proc/sys/kernel/pid_max");
  if (pid_max > 0 && pid_max < m.processes.max) {
    m.processes = {pid_max,
                   absl::StrCat("/proc/sys/kernel/pid_max is ", pid_max)};
  }
  rlimit nproc{};
  if (::getrlimit(RLIMIT_NPROC, &nproc) == 0 &&
      nproc.rlim_cur != RLIM_INFINITY &&
      static_cast<int64_t>(nproc.rlim_cur) < m.processes.max) {
    m.processes = {static_cast<int64_t>(nproc.rlim_cur),
                   absl::StrCat("this user's RLIMIT_NPROC (ulimit -u) is ",
                                nproc.rlim_cur)};
  }
  return m;
}

const Machine& TheMachine() {
  static const Machine* const machine = new Machine(ReadMachine());
  return *machine;
}

}  // namespace

int UsableCores() { return TheMachine().cores; }

int64_t UsableMemoryBytes() { return TheMachine().memory; }

Limit ThreadLimit() {
  const int cores = UsableCores();
  return {kPerCore * cores, absl::StrCat(kPerCore, "x this machine's ", cores,
                                         cores == 1 ? " core" : " cores")};
}

Limit ProcessLimit() { return TheMachine().processes; }

Limit LocalProcessLimit() {
  const Limit threads = ThreadLimit();
  const Limit& processes = TheMachine().processes;
  return threads.max <= processes.max ? threads : processes;
}

Limit MemoryLimit() { return {TheMachine().memory, TheMachine().memory_why}; }

Limit WorldSizeLimit() {
  return {kMaxWorldSize, "a fixed cap on the ranks of one job"};
}

Limit BatchSizeLimit() {
  return {kMaxBatchSize, "a fixed cap on the examples of one batch"};
}

absl::Status CheckAtMost(absl::string_view name, int64_t value,
                         const Limit& limit) {
  if (value <= limit.max) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      name, "=", value, ": at most ", limit.max, " (", limit.why, ")"));
}

absl::Status CheckFiniteSize(absl::string_view name, double value,
                             double unit_bytes, absl::string_view unit) {
  // Compared as doubles: a huge value never reaches an integer conversion.
  if (!std::isfinite(value) || !(value > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, "=", value, ": must be a finite number > 0 (", unit, ")"));
  }
  const Limit memory = MemoryLimit();
  const double max = std::floor(static_cast<double>(memory.max) / unit_bytes);
  if (value <= max) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      name, "=", value, ": at most ", max, " ", unit, " (", memory.why, ")"));
}

namespace internal {

int64_t ParseCgroupMemoryLimit(absl::string_view text) {
  int64_t value = -1;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &value) ||
      value <= 0) {
    return -1;
  }
  return value;
}

}  // namespace internal
}  // namespace dtrain::base
