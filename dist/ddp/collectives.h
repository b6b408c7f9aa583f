// How DistributedDataParallel's internals use the backend: the prefix of
// every error they return, waits bounded by DdpOptions::timeout whose errors
// name what was waited for, and gathers done as sums. Shared by the reducer
// and the model sync so that both word their errors the same way.
//
// Thread safety: const and stateless beyond the backend reference, so as safe
// as the backend itself (see backend.h on issue order). Lifetimes: the
// backend must outlive the object.
#ifndef DTRAIN_DIST_DDP_COLLECTIVES_H_
#define DTRAIN_DIST_DDP_COLLECTIVES_H_

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "dist/backend/backend.h"

namespace dtrain::ddp::internal {

// "[rank 1] ddp: ", in front of every error DDP returns.
std::string ErrorPrefix(int rank);

class Collectives {
 public:
  Collectives(backend::Backend& backend, absl::Duration timeout);

  backend::Backend& backend() const { return backend_; }
  // ErrorPrefix(backend.rank()).
  const std::string& prefix() const { return prefix_; }
  // prefix() + "LibTorch: ", for LibTorch exceptions turned into Status.
  const std::string& torch_prefix() const { return torch_prefix_; }

  // Waits for `work` within the timeout. Errors read "<prefix><what> failed
  // after <time since started>: <backend message>", or say that it did not
  // finish in time and is still running.
  absl::Status Wait(backend::Work& work, absl::string_view what,
                    absl::Time started) const;
  // The same with Work::WaitForResult: before reading the result on the
  // host.
  absl::Status WaitForResult(backend::Work& work, absl::string_view what,
                             absl::Time started) const;

  // Rank r's 1-D `mine` lands in row r of `*rows` ([world, n], on `device`)
  // on every rank once the returned work completes.
  //
  // This and ModelSync's broadcasts run as sums over zero-filled tensors
  // rather than the backend's AllGather and Broadcast: with Debian's Gloo, one
  // broadcast or allgather (Gloo's algorithm classes) slows every later ring
  // allreduce on the same backend by up to 1000x (1.2 MiB: 1.5 ms before,
  // 0.6 s after; measured here), which would ruin every gradient bucket. Sums
  // are exact here: every element has one nonzero term.
  std::shared_ptr<backend::Work> GatherBySum(const at::Tensor& mine,
                                             at::Device device,
                                             at::Tensor* rows,
                                             absl::string_view label) const;

 private:
  absl::Status Described(backend::Work& work, const absl::Status& s,
                         absl::string_view what, absl::Time started) const;

  backend::Backend& backend_;
  const absl::Duration timeout_;
  const std::string prefix_;
  const std::string torch_prefix_;
};

}  // namespace dtrain::ddp::internal

#endif  // DTRAIN_DIST_DDP_COLLECTIVES_H_
