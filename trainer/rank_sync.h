// Small collectives the trainer needs besides gradient averaging: exact sums
// and maxima of a few numbers, sending a byte string (a checkpoint) from one
// rank to all, and checking that every rank holds the same parameters. On the
// backend's device (CUDA for NCCL).
//
// Collective: every rank calls with the same sizes, in the same order as its
// other collectives.
#ifndef DTRAIN_TRAINER_RANK_SYNC_H_
#define DTRAIN_TRAINER_RANK_SYNC_H_

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dist/backend/backend.h"

namespace dtrain::trainer {

// Element-wise sum (kSum) or maximum (kMax) of `values` over all ranks, in
// float64 (exact for counts below 2^53).
absl::StatusOr<std::vector<double>> AllReduceValues(
    backend::Backend& backend, const std::vector<double>& values,
    backend::ReduceOp op, c10::Device device, absl::Duration timeout);

// Rank `root`'s `*bytes` on every rank. A root that has nothing to send
// passes `error`, which every rank then returns as kFailedPrecondition
// naming the root, so that all ranks fail together instead of waiting.
absl::Status BroadcastBytes(backend::Backend& backend, int root,
                            std::string* bytes, const absl::Status& error,
                            c10::Device device, absl::Duration timeout);

// Checks that every rank holds bit-identical `tensors` (name, tensor), as DDP
// promises for parameters: each rank fingerprints each tensor's bytes, and the
// ranks compare the fingerprints' maxima and minima (two small allreduces).
// kInternal naming up to five tensors that differ, on every rank alike.
absl::Status CheckIdenticalAcrossRanks(
    backend::Backend& backend,
    const std::vector<std::pair<std::string, at::Tensor>>& tensors,
    c10::Device device, absl::Duration timeout);

}  // namespace dtrain::trainer

#endif  // DTRAIN_TRAINER_RANK_SYNC_H_
