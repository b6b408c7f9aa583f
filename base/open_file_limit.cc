#include "base/open_file_limit.h"

#include <sys/resource.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <limits>

#include "base/posix_io.h"

namespace dtrain::base {

absl::StatusOr<int64_t> RaiseOpenFileLimit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0)
    return ErrnoStatus(errno, "cannot read the open-file limit");
  if (limit.rlim_cur != limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) != 0) {
      return ErrnoStatus(errno,
                         "cannot raise the open-file limit to its hard limit");
    }
    limit = raised;
  }
  if (limit.rlim_cur == RLIM_INFINITY ||
      limit.rlim_cur > static_cast<rlim_t>(std::numeric_limits<int64_t>::max()))
    return std::numeric_limits<int64_t>::max();
  return static_cast<int64_t>(limit.rlim_cur);
}

void RaiseOpenFileLimitOrWarn(absl::string_view program) {
  const absl::StatusOr<int64_t> limit = RaiseOpenFileLimit();
  if (!limit.ok()) {
    std::fprintf(stderr, "%.*s: warning: %.*s\n",
                 static_cast<int>(program.size()), program.data(),
                 static_cast<int>(limit.status().message().size()),
                 limit.status().message().data());
  }
}

}  // namespace dtrain::base
