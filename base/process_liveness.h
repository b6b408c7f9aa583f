// Whether another process on this host is still running, for errors that
// name a peer that has gone ("rank 1 (pid 4242) has exited"). A process that
// has exited but not yet been reaped by its parent (a zombie) counts as gone:
// under a launcher that reaps late, or a test that waits for its children in
// order, the pid still exists long after the rank died.
#ifndef DTRAIN_BASE_PROCESS_LIVENESS_H_
#define DTRAIN_BASE_PROCESS_LIVENESS_H_

#include <cstdint>

namespace dtrain::base {

// True when `pid` names a process that exists and has not exited (visible in
// this PID namespace; one owned by another user counts). Thread-safe.
bool ProcessRunning(int64_t pid);

// True when `pid` is stopped (SIGSTOP, SIGTSTP, or by a tracer): it cannot act
// on SIGTERM until continued. Thread-safe.
bool ProcessStopped(int64_t pid);

}  // namespace dtrain::base

#endif  // DTRAIN_BASE_PROCESS_LIVENESS_H_
