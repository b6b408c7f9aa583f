// Small collectives the trainer needs besides gradient averaging: exact sums
// and maxima of a few numbers (and the scores made of them), sending a byte
// string (a checkpoint) or an error from one rank to all, and checking that
// every rank holds the same parameters. One handle carries what every such call
// needs: the backend, the device its collectives run on (CUDA for NCCL) and the
// timeout.
//
//   RankSync sync(backend, device, options.timeout);
//   DTRAIN_ASSIGN_OR_RETURN(std::vector<double> max,
//                           sync.AllReduce({seconds}, ReduceOp::kMax));
//
// Collective: every rank calls each method with the same sizes, in the same
// order as its other collectives. Thread safety: as the backend's (one
// issuing thread). Lifetimes: the backend must outlive the handle.
#ifndef DTRAIN_TRAINER_RANK_SYNC_H_
#define DTRAIN_TRAINER_RANK_SYNC_H_

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dist/backend/backend.h"

namespace dtrain::trainer {

class RankSync {
 public:
  RankSync(backend::Backend& backend, c10::Device device,
           absl::Duration timeout)
      : backend_(&backend), device_(device), timeout_(timeout) {}

  backend::Backend& backend() const { return *backend_; }
  int rank() const { return backend_->rank(); }
  int world_size() const { return backend_->size(); }
  c10::Device device() const { return device_; }
  absl::Duration timeout() const { return timeout_; }

  // Element-wise sum (kSum) or maximum (kMax) of `values` over all ranks, in
  // float64 (exact for counts below 2^53).
  absl::StatusOr<std::vector<double>> AllReduce(
      const std::vector<double>& values, backend::ReduceOp op) const;

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
  // A tensor of `t`'s values on device_.
  at::Tensor OnDevice(const at::Tensor& t) const;

  backend::Backend* backend_;
  c10::Device device_;
  absl::Duration timeout_;
};

// Over every rank's examples.
struct Scores {
  double loss = 0;  // mean per example
  double top1 = 0;  // percent
  double top5 = 0;  // percent
  double examples = 0;
};

// Scores from each rank's sums (one allreduce). Collective.
absl::StatusOr<Scores> ScoresOverRanks(const RankSync& sync, double loss_sum,
                                       int64_t correct1, int64_t correct5,
                                       int64_t examples);

}  // namespace dtrain::trainer

#endif  // DTRAIN_TRAINER_RANK_SYNC_H_
