// The process's limit on open descriptors (RLIMIT_NOFILE). Most systems start
// processes with a soft limit of 1024 under a much higher hard limit, for the
// sake of old select() code; a rank holds the store's connections, the
// backends' sockets, data files and checkpoints at once, so binaries raise the
// soft limit to the hard one at start-up, as servers do. The project uses
// poll(), never select(), so descriptors above 1024 are safe.
#ifndef DTRAIN_BASE_OPEN_FILE_LIMIT_H_
#define DTRAIN_BASE_OPEN_FILE_LIMIT_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dtrain::base {

// Raises the soft limit to the hard limit and returns the soft limit now in
// force (INT64_MAX for unlimited). An error only when the limit cannot be read
// or set; the process then keeps its limit. Call early in main, before threads
// start: the limit is per process.
absl::StatusOr<int64_t> RaiseOpenFileLimit();

// RaiseOpenFileLimit for a binary's main: a failure is written to stderr as a
// warning naming `program`, and the program goes on with its limit.
void RaiseOpenFileLimitOrWarn(absl::string_view program);

}  // namespace dtrain::base

#endif  // DTRAIN_BASE_OPEN_FILE_LIMIT_H_
