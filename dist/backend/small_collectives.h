// The collectives beside the gradients, behind one handle that DDP and the
// trainer share: waits bounded by one timeout whose errors say what was
// waited for and for how long, rows gathered as sums, exact sums and maxima
// of a few numbers, a byte string (or the sender's error) sent from one rank
// to all, and a check that every rank holds the same tensors.
//
//   SmallCollectives sync(backend, device, timeout);
//   DTRAIN_ASSIGN_OR_RETURN(std::vector<double> max,
//                           sync.AllReduce({seconds}, ReduceOp::kMax));
//
// GatherBySum runs as a sum over zero-filled tensors rather than the
// backend's AllGather: with Debian's Gloo, one broadcast or allgather (Gloo's
// algorithm classes) slows every later ring allreduce on the same backend by
// up to 1000x (1.2 MiB: 1.5 ms before, 0.6 s after; measured here), which
// would ruin every gradient bucket after it. Sums are exact here: every
// element has one nonzero term. Broadcast still uses the backend's
// Broadcast (the trainer sends a checkpoint with it once, at resume).
//
// Collective: every rank calls each method with the same sizes, in the same
// order as its other collectives. Thread safety: const and stateless beyond
// the backend reference, so as safe as the backend itself (backend.h on issue
// order). Lifetimes: the backend must outlive the handle.
#ifndef DTRAIN_DIST_BACKEND_SMALL_COLLECTIVES_H_
#define DTRAIN_DIST_BACKEND_SMALL_COLLECTIVES_H_

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "dist/backend/backend.h"

namespace dtrain::backend {

class SmallCollectives {
 public:
  // `device`: where the collectives run (the CPU for Gloo and shared memory,
  // the rank's CUDA device for NCCL). `error_prefix` starts every error the
  // waits return ("[rank 1] ddp: "), and `timeout_name` is what their
  // deadline message calls the timeout ("DdpOptions::timeout").
  SmallCollectives(Backend& backend, c10::Device device, absl::Duration timeout,
                   std::string error_prefix = "",
                   std::string timeout_name = "the timeout");

  Backend& backend() const { return *backend_; }
  int rank() const { return backend_->rank(); }
  int world_size() const { return backend_->size(); }
  c10::Device device() const { return device_; }
  absl::Duration timeout() const { return timeout_; }
  const std::string& prefix() const { return prefix_; }
  // prefix() + "LibTorch: ", for LibTorch exceptions turned into Status.
  const std::string& torch_prefix() const { return torch_prefix_; }

  // Waits for `work` within the timeout. Errors read "<prefix><what> failed
  // after <time since started>: <backend message>", or say that it did not
  // finish in time and is still running, followed by the wait's own message
  // (with a stall report, the ranks that have not joined).
  absl::Status Wait(Work& work, absl::string_view what,
                    absl::Time started) const;
  // The same with Work::WaitForResult: before reading the result on the
  // host.
  absl::Status WaitForResult(Work& work, absl::string_view what,
                             absl::Time started) const;

  // Rank r's 1-D `mine` lands in row r of `*rows` ([world, n], on `device`)
  // on every rank once the returned work completes.
  std::shared_ptr<Work> GatherBySum(const at::Tensor& mine, at::Device device,
                                    at::Tensor* rows,
                                    absl::string_view label) const;

  // Element-wise sum (kSum) or maximum (kMax) of `values` over all ranks, in
  // float64 (exact for counts below 2^53). Errors: the backend's.
  absl::StatusOr<std::vector<double>> AllReduce(
      const std::vector<double>& values, ReduceOp op) const;

  // Rank `root`'s `*bytes` on every rank. A root that has nothing to send
  // passes its `error`, which every rank then returns: the root as it is,
  // the others with its code and message after "rank <root>: ", so that all
  // ranks fail together, saying why, instead of waiting.
  absl::Status Broadcast(int root, std::string* bytes,
                         const absl::Status& error = absl::OkStatus()) const;

  // Checks that every rank holds bit-identical `tensors` (name, tensor), as
  // DDP promises for parameters: each rank fingerprints each tensor's bytes,
  // and the ranks compare the fingerprints' maxima and minima (two small
  // allreduces). kInternal naming up to five tensors that differ, on every
  // rank alike.
  absl::Status CheckIdentical(
      const std::vector<std::pair<std::string, at::Tensor>>& tensors) const;

 private:
  absl::Status Described(Work& work, const absl::Status& s,
                         absl::string_view what, absl::Time started) const;
  // `t` on device_.
  at::Tensor OnDevice(const at::Tensor& t) const;

  Backend* backend_;
  c10::Device device_;
  absl::Duration timeout_;
  std::string prefix_;
  std::string torch_prefix_;
  std::string timeout_name_;
};

}  // namespace dtrain::backend

#endif  // DTRAIN_DIST_BACKEND_SMALL_COLLECTIVES_H_
