#include "base/process_liveness.h"

#include <signal.h>

#include <cerrno>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"

namespace dtrain::base {

bool ProcessRunning(int64_t pid) {
  if (pid <= 0) return false;
  // EPERM: it exists, owned by someone else.
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno != EPERM) return false;
  // "<pid> (<comm>) <state> ...": the state follows the last ')', since the
  // command name may itself hold parentheses.
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat;
  if (!std::getline(in, stat)) return true;  // Cannot tell: it exists.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size()) return true;
  const char state = stat[close + 2];
  return state != 'Z' && state != 'X';
}

}  // namespace dtrain::base
