// DistributedDataParallel for the LibTorch C++ frontend: PyTorch's
// torch.nn.parallel.DistributedDataParallel semantics over our Backend.
//
//   // model: std::shared_ptr<Net>, Net a torch::nn::Module subclass; the
//   // macros are base/status_macros.h's.
//   DTRAIN_ASSIGN_OR_RETURN(
//       std::unique_ptr<DistributedDataParallel> ddp,
//       DistributedDataParallel::Create(model, backend, options));
//   torch::optim::SGD optimizer(model->parameters(), /*lr=*/0.1);
//   for (const auto& [x, y] : batches) {
//     // Buffers (batch-norm statistics) from rank 0.
//     DTRAIN_RETURN_IF_ERROR(ddp->PrepareForward());
//     at::Tensor loss = torch::nll_loss(model->forward(x), y);
//     // Buckets allreduce as they fill, overlapping backward.
//     loss.backward();
//     // Waits for the rest; .grad then holds the average over ranks.
//     DTRAIN_RETURN_IF_ERROR(ddp->SynchronizeGradients());
//     optimizer.step();
//     optimizer.zero_grad();
//   }
//
// Gradient accumulation: run all but the last micro-batch of a step (forward
// and backward) while a NoSyncGuard is alive; .grad then accumulates locally
// and the next synchronised backward averages the accumulated sum.
//
// Construction (Create) is collective: it checks that every rank has the same
// parameters and buffers (names, shapes, dtypes, in registration order) and
// fails on every rank with the first difference and the ranks on each side;
// then it broadcasts parameters and buffers from rank 0. Before any
// collective it refuses, naming the parameters, a model the backend cannot
// serve: parameters and buffers on several devices, on anything but CUDA for
// the nccl backend or the CPU for gloo, or of a dtype no backend reduces
// (trainable parameters: float32, float64, float16, bfloat16). Mixed floating
// dtypes, such as float16 layers in a float32 model, are supported: each
// bucket holds one dtype.
//
// Buckets: parameters that require grad, in reverse registration order, are
// grouped into flat buckets (a bucket closes once it reaches its cap:
// first_bucket_cap_bytes for the first, bucket_cap_bytes for the rest, as in
// PyTorch; one dtype per bucket, allocated on the parameters' device, so
// NCCL's gradients never leave the GPU). A hook on each parameter's gradient
// accumulator runs once backward has added the gradient into .grad; with
// gradient_as_bucket_view (the default) .grad is the parameter's slice of
// its bucket, so there is nothing to copy; otherwise the hook copies .grad
// into the bucket. A complete bucket goes to the communication hook
// (comm_hook.h; an allreduce unless RegisterCommHook chose another) at once,
// but only after every earlier bucket was launched, so every rank issues the
// same collectives in the same order and communication overlaps the rest of
// backward. SynchronizeGradients leaves the average in .grad. So with or
// without no_sync, .grad ends up as the average over ranks of each rank's
// locally accumulated gradient, exactly as in PyTorch. Parameters that got no
// gradient in a synchronised step (unused ones) contribute their current
// .grad, or zeros, as PyTorch with find_unused_parameters=True;
// UnusedParameters::kError fails instead.
// Unlike PyTorch, every such parameter gets a defined .grad afterwards (zeros
// when unused everywhere), where PyTorch leaves a globally unused one alone.
// Whether a backward synchronises is decided when its hooks run (PyTorch
// decides at forward): keep a NoSyncGuard alive over both forward and backward,
// as PyTorch's documentation does, and the two agree.
//
// Call order across ranks: Create, PrepareForward and SynchronizeGradients
// issue collectives, and backward issues bucket allreduces, so every rank must
// call them in the same sequence, with the same no_sync pattern, and run
// backward between them the same number of times. In a Join, a rank that has
// joined stands in for those calls through the Join (join.h).
//
// Thread safety: one training thread drives a DistributedDataParallel; the
// hooks may run on LibTorch's autograd threads (CUDA) and synchronise with it
// internally. Do not run backward concurrently with SynchronizeGradients or
// PrepareForward.
//
// Lifetimes: the module and the backend must outlive the object; the module's
// parameter tensors must not be replaced while it is wrapped (in-place updates
// such as optimizer steps are fine). The destructor removes the hooks; do not
// destroy it while a backward runs.
//
// Uneven inputs: DDP is a Joinable (join.h, PyTorch's DDP join hook). In a
// Join where it comes first, PrepareForward notifies the Join, and buffers
// come from the highest active rank instead of rank 0. A joined rank's
// shadow of an iteration issues what an active rank's PrepareForward,
// forward, backward and SynchronizeGradients issue: the buffer broadcast,
// the collectives of the module's ShadowableLayers (SyncBatchNorm) with
// nothing from this rank, in the order of this rank's last forward (forwards,
// then backwards in reverse), then every bucket, zeroed, through the
// communication hook, and kError's flag exchange; the active ranks' average
// lands in its .grad. While the module has such layers, buckets launch after
// backward (see Reducer::set_launch_in_backward): a joined rank can then
// reproduce the order. Finish broadcasts parameters and buffers from the last
// rank to join.
//
// Errors come back as absl::Status naming the rank, the step, the bucket and
// its size: "[rank 1] ddp: step 12, bucket 3 (2.1 MiB, 14 parameters
// fc1.bias..conv2.weight) allreduce failed after 1.2s: <backend message>".
// After a communication failure the object is broken: every later call
// returns the first error at once (the backend is broken too).
#ifndef DTRAIN_DIST_DDP_DDP_H_
#define DTRAIN_DIST_DDP_DDP_H_

#include <torch/nn/module.h>

#include <atomic>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dist/backend/backend.h"
#include "dist/ddp/comm_hook.h"
#include "dist/ddp/ddp_types.h"
#include "dist/ddp/join.h"

namespace dtrain::ddp {

namespace internal {
class LayerOrder;
class ModelSync;
class Reducer;
}  // namespace internal

// DdpOptions, BucketInfo and StepStats are declared in ddp_types.h.
class DistributedDataParallel : public Joinable {
 public:
  // Collective (see the file comment). kInvalidArgument for bad options (found
  // before any collective, so give every rank the same options) or models
  // that differ across ranks; the backend's error when a collective fails.
  // LibTorch exceptions become kInternal.
  static absl::StatusOr<std::unique_ptr<DistributedDataParallel>> Create(
      std::shared_ptr<torch::nn::Module> module, backend::Backend& backend,
      const DdpOptions& options = {});

  ~DistributedDataParallel() override;
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  // Replaces the built-in allreduce with `hook` (PyTorch's
  // register_comm_hook; built-in hooks in dist/ddp/hooks/). Collective: every
  // rank registers the same kind of hook, once, before the first synchronised
  // backward (kFailedPrecondition otherwise). A failed Setup breaks the
  // object.
  absl::Status RegisterCommHook(std::shared_ptr<CommHook> hook);
  // The hook in use: for checkpointing its State after SynchronizeGradients
  // and restoring it with LoadState before the first step.
  CommHook& comm_hook();

  // Call before each forward pass. Broadcasts buffers from rank 0 when
  // broadcast_buffers is set, unless the previous PrepareForward ran under
  // no_sync or with grad mode off (PyTorch's rule: a forward that will not
  // synchronise marks the buffers as not needing a sync before the next one).
  // kFailedPrecondition when a synchronised backward ran since the last
  // SynchronizeGradients. In a Join: notifies it first (when DDP is its
  // first joinable; otherwise kFailedPrecondition unless Join::NotifyActive
  // ran since the last PrepareForward), and the buffers come from the
  // round's authoritative rank; the Join's errors as they are.
  absl::Status PrepareForward();

  // Call after each synchronised backward, before the optimizer step: launches
  // the buckets still pending (filling parameters that had no gradient),
  // waits for all of them and writes the averages into each parameter's .grad.
  // On CPU (Gloo) the wait blocks the host on each bucket; on CUDA (NCCL) it
  // makes the compute stream wait for each bucket's allreduce and the host
  // goes on queuing the averaging copies and the optimizer step (backend.h).
  // A no-op returning OK while gradient sync is off (inside a NoSyncGuard).
  absl::Status SynchronizeGradients();

  // Waits on the host until the last synchronised step's gradient allreduces
  // have finished and returns their status. On CUDA, SynchronizeGradients
  // returns before they have run, and one that fails afterwards leaves
  // garbage averages in .grad (and, after the optimizer step, in the
  // parameters); the failure also fails every later collective, so the next
  // step reports it. Call this before saving what the last step changed (a
  // checkpoint): OK says the averages were real. On CPU backends the status
  // SynchronizeGradients returned already. OK before any step.
  absl::Status ConfirmLastStep();

  // While alive, backward passes accumulate gradients locally and
  // communicate nothing. Nests; restores the previous setting on exit.
  class [[nodiscard]] NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallel& ddp);
    ~NoSyncGuard();
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  NoSyncGuard NoSync() { return NoSyncGuard(*this); }

  // The flag NoSyncGuard sets, as PyTorch's require_backward_grad_sync.
  void set_gradient_sync(bool enabled) { gradient_sync_.store(enabled); }
  bool gradient_sync() const { return gradient_sync_.load(); }

  const std::vector<BucketInfo>& buckets() const;
  // The last synchronised step; read from the training thread after
  // SynchronizeGradients returned.
  const StepStats& last_step_stats() const;
  int64_t steps() const { return last_step_stats().step; }

  torch::nn::Module& module() { return *module_; }
  const std::shared_ptr<torch::nn::Module>& module_ptr() const {
    return module_;
  }
  backend::Backend& backend() { return backend_; }
  const DdpOptions& options() const { return options_; }

  // Joinable (join.h; see the file comment). Training thread only.
  std::string JoinableName() const override { return "ddp"; }
  // kFailedPrecondition when already in a Join.
  absl::Status Attach(Join& join, bool notifies) override;
  void Detach() override;
  void OnRound(const JoinRound& round) override;
  absl::Status Shadow(const JoinRound& round) override;
  absl::Status Finish(const JoinSummary& summary) override;

 private:
  DistributedDataParallel(std::shared_ptr<torch::nn::Module> module,
                          backend::Backend& backend, const DdpOptions& options);
  // PrepareForward's part in a Join: the notification, or the check that
  // the caller notified.
  absl::Status NotifyJoin();

  std::shared_ptr<torch::nn::Module> module_;
  backend::Backend& backend_;
  const DdpOptions options_;
  std::atomic<bool> gradient_sync_{true};
  // PyTorch's require_forward_param_sync: whether the next PrepareForward
  // broadcasts buffers. Training thread only.
  bool require_forward_param_sync_ = true;
  // The reducer's hooks read gradient_sync_: declared after it, so destroyed
  // (hooks removed) before it.
  std::unique_ptr<internal::ModelSync> model_sync_;
  std::unique_ptr<internal::Reducer> reducer_;

  // In a Join (null otherwise); whether DDP notifies it; its last round, and
  // the round of the last PrepareForward.
  Join* join_ = nullptr;
  bool notifies_ = false;
  JoinRound round_;
  int64_t round_at_forward_ = 0;
  // The module's ShadowableLayers and the order of their last forward.
  std::unique_ptr<internal::LayerOrder> layer_order_;
};

}  // namespace dtrain::ddp

#endif  // DTRAIN_DIST_DDP_DDP_H_
