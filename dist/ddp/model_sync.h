// Model synchronization for DistributedDataParallel: the collectives outside
// backward. At construction, the cross-rank model check (names, shapes and
// dtypes of parameters and buffers, compared through model_fingerprint.h)
// and the broadcast of parameters and buffers from rank 0; before a forward,
// the buffer broadcast; after uneven inputs (join.h), the final model from
// the last rank to join.
//
// Call order: every method that issues collectives must be called by every
// rank in the same sequence (see ddp.h). Thread safety: none of its own; the
// training thread drives it. Lifetimes: the backend must outlive the object;
// it keeps handles to the module's tensors, so they must not be replaced
// while it lives (in-place updates are fine).
#ifndef DTRAIN_DIST_DDP_MODEL_SYNC_H_
#define DTRAIN_DIST_DDP_MODEL_SYNC_H_

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "dist/backend/backend.h"
#include "dist/ddp/collectives.h"

namespace dtrain::ddp::internal {

class ModelSync {
 public:
  // Collective. First, before any collective, refuses a module the backend
  // cannot serve (kInvalidArgument naming the parameters): tensors on
  // several devices, on a device other than CUDA for "nccl" or the CPU for
  // "gloo", trainable parameters of a dtype other than float32, float64,
  // float16 and bfloat16 (mixing those is fine: buckets are per dtype), and
  // other tensors the backends cannot carry (complex, int16, ...).
  // Then checks that every rank has the same parameters and buffers
  // (kInvalidArgument naming the first difference and the ranks on each
  // side), and with `broadcast` copies rank 0's values to every rank (without
  // it the caller vouches that they are equal already). LibTorch exceptions
  // become kInternal; a failed collective returns the backend's error.
  // `timeout` bounds each wait (DdpOptions::timeout).
  static absl::StatusOr<std::unique_ptr<ModelSync>> Create(
      const torch::nn::Module& module, backend::Backend& backend,
      absl::Duration timeout, bool broadcast = true);

  ModelSync(const ModelSync&) = delete;
  ModelSync& operator=(const ModelSync&) = delete;

  // Collective: copies every buffer from `root` (rank 0, or a Join's
  // authoritative rank). `what` names them in errors and labels, e.g.
  // "buffers before step 3".
  absl::Status BroadcastBuffers(absl::string_view what, int root = 0);
  // Collective: copies every parameter (frozen ones too) and, with
  // `buffers`, every buffer from `root`, as PyTorch's _sync_module_states.
  absl::Status BroadcastModel(absl::string_view what, int root, bool buffers);
  bool has_buffers() const { return !buffers_.empty(); }

  // The parameters that require grad, with their names, in registration
  // order, as found by Create: what the reducer buckets.
  const std::vector<std::pair<std::string, at::Tensor>>& trainable_parameters()
      const {
    return trainable_;
  }
  // The device of the first parameter (else buffer): where small control
  // exchanges such as the model check run.
  at::Device control_device() const { return control_device_; }

 private:
  ModelSync(backend::Backend& backend, absl::Duration timeout);

  // Every rank compares a fingerprint of its entries; when they differ, the
  // ranks exchange the entries themselves to name the first difference.
  absl::Status CheckSameModel(const std::vector<std::string>& entries);

  // Copies `tensors` from `root` to every rank: one collective per dtype and
  // device, all issued before the first wait.
  absl::Status BroadcastFrom(int root, const std::vector<at::Tensor>& tensors,
                             absl::string_view what);

  const backend::SmallCollectives comm_;
  std::vector<std::pair<std::string, at::Tensor>> trainable_;
  std::vector<at::Tensor> parameters_;
  std::vector<at::Tensor> buffers_;
  at::Device control_device_ = at::kCPU;
};

}  // namespace dtrain::ddp::internal

#endif  // DTRAIN_DIST_DDP_MODEL_SYNC_H_
