#include "base/process_liveness.h"

#include <signal.h>

#include <cerrno>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"

namespace dtrain::base {

namespace {

// The state letter of /proc/<pid>/stat ("R", "S", "T", "Z", ...), or '?'
// when it cannot be read.
char ProcessState(int64_t pid) {
  // "<pid> (<comm>) <state> ...": the state follows the last ')', since the
  // command name may itself hold parentheses.
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat;
  if (!std::getline(in, stat)) return '?';
  const size_t close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size()) return '?';
  return stat[close + 2];
}

}  // namespace

bool ProcessRunning(int64_t pid) {
  if (pid <= 0) return false;
  // EPERM: it exists, owned by someone else.
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno != EPERM) return false;
  const char state = ProcessState(pid);  // '?': cannot tell, but it exists.
  return state != 'Z' && state != 'X';
}

bool ProcessStopped(int64_t pid) {
  if (pid <= 0) return false;
  const char state = ProcessState(pid);
  return state == 'T' || state == 't';
}

}  // namespace dtrain::base
