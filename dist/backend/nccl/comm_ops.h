// What the NCCL backend's watchdog and its Work handles need from the device
// and the communicator, behind one small interface. The NCCL backend
// implements it with CUDA events, streams and NCCL calls; tests implement it
// with plain flags, so that the state machine that completes, times out and
// aborts collectives, and the decision of when Wait blocks the host, are
// tested on machines without a GPU.
#ifndef DTRAIN_DIST_BACKEND_NCCL_COMM_OPS_H_
#define DTRAIN_DIST_BACKEND_NCCL_COMM_OPS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace dtrain::backend::nccl_internal {

// Thread safety: the watchdog serializes every call that touches the
// communicator (Settled, AsyncError, Abort, and the enqueues' own library
// calls); Abort at most once. OrderCurrentStreamAfter comes from any thread
// waiting on a Work.
class CommOps {
 public:
  virtual ~CommOps() = default;

  enum class EventState { kDone, kPending, kFailed };
  // Whether `event`, recorded on the communication stream after a collective,
  // has fired. On kFailed, `*error` says why.
  virtual EventState Query(void* event, std::string* error) = 0;

  // Whether the calls made on a non-blocking communicator have finished
  // enqueuing (kDone), are still in progress (kPending: connecting to peers,
  // enqueuing in the background) or failed (`*error` says why). A blocking
  // communicator is always done.
  virtual EventState Settled(std::string* error) = 0;

  // The communicator's asynchronous error (a peer died, a network error), or
  // empty when there is none.
  virtual std::string AsyncError() = 0;

  // The peers known to be gone ("rank 1 (pid 4242 on node01) has exited"),
  // or empty when none is known; asked only once a collective has failed.
  virtual std::string LostPeers() = 0;

  // Aborts the communicator: collectives in flight stop waiting for peers.
  virtual void Abort() = 0;

  // Whether everything queued on the communication stream has run.
  virtual bool StreamIdle() = 0;

  // Makes the calling thread's current stream wait for `event` (on the
  // device; the host does not wait).
  virtual absl::Status OrderCurrentStreamAfter(void* event) = 0;

  // Called once, first, on the watchdog thread (makes the backend's device
  // current there, so that nothing it calls creates a context elsewhere).
  virtual void BindThread() = 0;
};

}  // namespace dtrain::backend::nccl_internal

#endif  // DTRAIN_DIST_BACKEND_NCCL_COMM_OPS_H_
