// The collective-communication interface that data-parallel training runs on:
// allreduce, broadcast, allgather, reduce-scatter and barrier over
// torch::Tensor, implemented by Gloo (CPU tensors) and NCCL (CUDA tensors).
// Create one with CreateBackend (factory.h).
//
// Ordering contract: every rank issues the same collectives, with the same
// shapes, dtypes and roots, in the same order. A backend runs its collectives
// in issue order. A rank that breaks the contract gets undefined results:
// mismatched sizes usually fail or hang until the timeout, but tensors of equal
// byte size and different dtypes can be combined silently.
//
// Asynchrony and lifetimes: each call returns at once with a Work handle; the
// backend keeps the tensors alive until the collective finishes. The caller
// must not read or write a tensor passed to a collective until that
// collective's Work::Wait has returned OK. Results are written in place.
// For CPU tensors Wait returns once the results are there. For CUDA tensors
// (NCCL) it returns once the calling thread's current CUDA stream is ordered
// after the collective, as PyTorch's NCCL work does: kernels queued later on
// that stream, and host reads through LibTorch (which synchronize it), see the
// results; raw device pointers read on another stream need their own
// synchronization.
//
// Errors: argument errors (wrong device, unsupported dtype, mismatched sizes)
// come back as an already failed Work with kInvalidArgument. Failures while
// running (a dead peer, a timeout) fail the Work with a message naming the
// rank, the operation, its sequence number, its size, how long it ran and,
// where the library says, the peer: "[rank 1] gloo allreduce #12 (sum, 4096 x
// float32 = 16 KiB) failed after 1.2s: Connection closed by peer
// [127.0.0.1]:41234". After a failure the backend is broken: every later call
// fails at once with the first error.
//
// Thread safety: calls may come from any thread, but the contract above is
// about issue order, so callers issuing from several threads must order them
// the same way on every rank.
#ifndef DTRAIN_DIST_BACKEND_BACKEND_H_
#define DTRAIN_DIST_BACKEND_BACKEND_H_

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/optional.h"

namespace dtrain::backend {

enum class ReduceOp { kSum, kAverage, kMin, kMax, kProduct };

// "sum", "average", "min", "max", "product".
absl::string_view ReduceOpName(ReduceOp op);

// When a collective ran, by the host clock.
struct WorkTimes {
  // It started running: after the collectives issued before it on this rank.
  absl::Time started;
  // It completed, successfully or not.
  absl::Time finished;
};

// A collective in flight.
class Work {
 public:
  virtual ~Work() = default;

  // Waits until the results may be used (see "Asynchrony" above: on CUDA the
  // caller's stream waits, not the host, except for Barrier) or `timeout`
  // passed, and returns the status: OK, the collective's error, or
  // kDeadlineExceeded if the host wait ran out (the collective keeps running).
  virtual absl::Status Wait(
      absl::Duration timeout = absl::InfiniteDuration()) = 0;

  // Waits on the host until the collective has finished (or `timeout`
  // passed) and returns its final status. Use it before reading a result on
  // the host: on CUDA, Wait's OK only says the stream will wait, and a
  // collective that fails after it leaves garbage in the tensor, which a
  // host read (.item(), .cpu()) would take for data. On CPU backends, where
  // Wait blocks until the end anyway, it is Wait.
  virtual absl::Status WaitForResult(
      absl::Duration timeout = absl::InfiniteDuration()) {
    return Wait(timeout);
  }

  // True once finished, successfully or not; never blocks.
  virtual bool IsCompleted() = 0;

  // The collective's status once completed; OK while still running.
  virtual absl::Status status() = 0;

  // When it ran, once completed, where a host thread runs it (Gloo, shm);
  // nullopt before that and where the host cannot tell (NCCL runs on the
  // device). For DDP's per-step timeline.
  virtual absl::optional<WorkTimes> times() { return absl::nullopt; }
};

class Backend {
 public:
  virtual ~Backend() = default;

  // The backend the caller chose, whatever the layout: "gloo", "nccl", "shm"
  // or "gloo+shm" (factory.h).
  virtual absl::string_view name() const = 0;
  // How the ranks are spread over hosts, where the backend knows it: "2 hosts:
  // ranks 0, 1 | 2, 3" (a host's ranks, hosts apart by " | "); empty
  // otherwise.
  virtual std::string layout() const { return std::string(); }
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Reduces `tensor` across ranks in place. kAverage divides the sum by size()
  // (floating dtypes). `label` is added to error messages (e.g. "bucket 3").
  virtual std::shared_ptr<Work> AllReduce(at::Tensor tensor,
                                          ReduceOp op = ReduceOp::kSum,
                                          absl::string_view label = "") = 0;

  // Copies `tensor` from rank `root` to every rank, in place.
  virtual std::shared_ptr<Work> Broadcast(at::Tensor tensor, int root) = 0;

  // Rank r's `input` lands in `outputs[r]` on every rank. outputs.size() ==
  // size(), each shaped and typed like `input`.
  virtual std::shared_ptr<Work> AllGather(std::vector<at::Tensor> outputs,
                                          at::Tensor input) = 0;

  // Reduces inputs[r] across ranks and leaves the result for rank r in its
  // `output`. inputs.size() == size(), each shaped and typed like `output`.
  // In place when `output` is inputs[rank()] and the inputs lie back to back
  // in one tensor: the other inputs may then be left with partial results.
  virtual std::shared_ptr<Work> ReduceScatter(at::Tensor output,
                                              std::vector<at::Tensor> inputs,
                                              ReduceOp op = ReduceOp::kSum) = 0;

  // Completes when every rank has issued it.
  virtual std::shared_ptr<Work> Barrier() = 0;

  // Gives up on this backend after a failure seen elsewhere (another backend,
  // the caller), as PyTorch's ProcessGroup::abort does: queued and later
  // collectives fail with `reason`, peers waiting for this rank learn it
  // where the transport can tell them (shared memory and NCCL at once, Gloo
  // when this process closes its connections), and destruction does not wait
  // for peers. A Gloo collective already running still finishes or times out.
  // Thread-safe; the first failure or reason stays.
  virtual void Abort(const absl::Status& reason) = 0;

  // Returns a zero-filled, contiguous 1-D CPU tensor of `numel` elements of
  // `dtype` placed where this backend's AllReduce can work on it with fewer
  // copies (the shm backend: shared memory every rank maps, so its allreduce
  // of any contiguous part of it copies nothing in or out). Any tensor works
  // with every collective; this is only a faster place for a long-lived one
  // such as a DDP bucket.
  //
  // A collective: every rank calls it in the same order, relative to the
  // other collectives too, with the same numel and dtype. It blocks until done
  // (on the shm backend, until every rank has mapped every rank's buffer) and
  // fails like a collective, naming the rank at fault; on the shm backend a
  // failure breaks the backend. The fast path applies to an AllReduce whose
  // tensor lies entirely inside one buffer at the same offset on every rank;
  // other tensors take the ordinary path.
  //
  // Lifetimes: the memory stays valid while the tensor or any view of its
  // storage lives, even after the backend is destroyed. The backend may hold
  // resources for each buffer until it is destroyed (the shm backend keeps
  // its mappings of every rank's buffers), so allocate a few long-lived
  // buffers, not one per step.
  //
  // The default, for backends without such memory (Gloo, and NCCL, whose
  // tensors live on the GPU: callers ask only for CPU buffers, and only of
  // CPU backends), is an ordinary zero-filled CPU tensor and no collective.
  virtual absl::StatusOr<at::Tensor> AllocateBuffer(int64_t numel,
                                                    at::ScalarType dtype);
};

}  // namespace dtrain::backend

#endif  // DTRAIN_DIST_BACKEND_BACKEND_H_
