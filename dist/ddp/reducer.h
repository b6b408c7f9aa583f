// The reducer of DistributedDataParallel: flat gradient buckets (or the
// parameters' .grad as views of them), the autograd hooks that mark
// gradients ready during backward, each bucket handed to the communication
// hook in bucket order, the rounds that drive the hooks' work to the end,
// the averages written back into .grad, no_sync, unused parameters, the
// static graph's bookkeeping and the per-step statistics. PyTorch's
// reducer.cpp plays the same part.
//
// Call order: Create allocates each CPU bucket through
// Backend::AllocateBuffer (a collective on the shm backend), one per bucket
// in bucket order, identical on every rank; RegisterCommHook's Setup may
// allocate more. A synchronised backward launches buckets from the hooks,
// and Synchronize launches the rest and waits, so every rank must run them
// in the same sequence (see ddp.h); a joined rank's ShadowSynchronize stands
// for a synchronised backward and its Synchronize.
//
// Thread safety: the autograd hooks may run on LibTorch's autograd threads;
// the state they touch is guarded by one mutex, which Synchronize releases
// while it waits. The other methods belong to the training thread and must
// not run concurrently with backward.
//
// Lifetimes: the backend and the gradient-sync flag must outlive the reducer,
// and the parameter tensors must not be replaced while it lives. Create
// registers the hooks and the destructor removes them: not during backward.
//
// After a communication failure or a broken invariant the reducer is broken:
// every later call returns the first error.
#ifndef DTRAIN_DIST_DDP_REDUCER_H_
#define DTRAIN_DIST_DDP_REDUCER_H_

#include <ATen/core/Tensor.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "dist/backend/backend.h"
#include "dist/backend/small_collectives.h"
#include "dist/ddp/bucket_assignment.h"
#include "dist/ddp/collectives.h"
#include "dist/ddp/comm_hook.h"
#include "dist/ddp/ddp_types.h"

namespace torch::autograd {
struct Node;
}  // namespace torch::autograd

namespace dtrain::ddp::internal {

class Reducer {
 public:
  // Buckets `parameters` (name and tensor, in registration order; bucketed in
  // reverse) by `options`' caps and registers a hook on each one's gradient
  // accumulator. The communication hook is hooks::AllReduceHook until
  // RegisterCommHook.
  // Gradients are communicated only while `gradient_sync` is true; small
  // control exchanges run on `control_device`. LibTorch exceptions become
  // kInternal.
  static absl::StatusOr<std::unique_ptr<Reducer>> Create(
      const std::vector<std::pair<std::string, at::Tensor>>& parameters,
      at::Device control_device, backend::Backend& backend,
      const DdpOptions& options, const std::atomic<bool>& gradient_sync);

  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Collective (the hook's Setup). Once, before the first synchronised
  // backward: kFailedPrecondition otherwise.
  absl::Status RegisterCommHook(std::shared_ptr<CommHook> hook);
  CommHook& comm_hook() const { return *hook_; }

  const std::vector<BucketInfo>& buckets() const { return bucket_info_; }
  // The last synchronised step; read after Synchronize returned.
  const StepStats& last_step_stats() const { return last_stats_; }

  // "step 12": the synchronised step under way, for messages.
  std::string StepName() const;

  // Whether a forward may start: the first error once broken, or
  // kFailedPrecondition when a synchronised backward ran since the last
  // Synchronize.
  absl::Status CheckReadyForForward() const;

  // Counts a buffer broadcast in the next step's statistics. A failed one
  // breaks the reducer: the backend is broken too.
  void RecordBufferBroadcast(absl::Duration elapsed,
                             const absl::Status& status);

  // SynchronizeGradients while gradient sync is on: fills in and launches the
  // buckets still pending, waits for all of them and writes the averages into
  // each parameter's .grad.
  absl::Status Synchronize();

  // Waits on the host until the last synchronised step's allreduces have
  // finished and returns their status (the first error once broken); OK
  // before any step. See DistributedDataParallel::ConfirmLastStep.
  absl::Status ConfirmLastStep();

  // Uneven inputs (join.h). What the sums of the coming synchronised step
  // are divided by: the world size (the default), or the ranks active in a
  // Join's round. Buckets are scaled by world size / divisor before the
  // communication hook, which averages over the world size.
  void set_divisor(int divisor);
  // false: buckets launch in Synchronize, after backward, instead of from
  // the gradient hooks, so that collectives a layer issues inside backward
  // (SyncBatchNorm) all come before the buckets' on every rank, an order a
  // joined rank can reproduce. Costs the overlap of communication with
  // backward.
  void set_launch_in_backward(bool launch);
  // A joined rank's synchronised step: every bucket, zeroed, goes through
  // the communication hook (and the unused-parameter flags, all "used",
  // through their exchange with UnusedParameters::kError), exactly as an
  // active rank's Synchronize issues them; the result, the active ranks'
  // average, lands in .grad as after Synchronize. Counts as a step.
  // kFailedPrecondition when a synchronised backward ran since the last
  // Synchronize; kError's verdict as on the active ranks.
  absl::Status ShadowSynchronize();

 private:
  struct Param {
    std::string name;
    at::Tensor tensor;
    int bucket = -1;
    // The parameter's slice of its bucket, shaped like the parameter (its
    // .grad with gradient_as_bucket_view).
    at::Tensor view;
    // The gradient accumulator, kept alive by `keep_accumulator` (the tensor
    // holds it weakly, and a new one would not have the hook; LibTorch 1.13
    // and 2.6 hand out a shared_ptr, 2.14 an intrusive_ptr).
    torch::autograd::Node* grad_accumulator = nullptr;
    std::shared_ptr<void> keep_accumulator;
    bool hooked = false;
    uintptr_t hook = 0;
  };

  struct Bucket {
    std::vector<int> params;  // Indices into params_.
    // What the communication hook sees; grad.buffer is the flat gradients,
    // allocated by the backend (AllocateBuffer) for CPU buckets.
    GradBucket grad;
    std::unique_ptr<BucketComm> comm;
    // Per step.
    int pending = 0;
    std::unique_ptr<BucketWork> work;
    absl::Time launched_at;
    bool launched_in_backward = false;
  };

  Reducer(backend::Backend& backend, const DdpOptions& options,
          const std::atomic<bool>& gradient_sync, at::Device control_device);

  // Create's work once the object has its final address (the hooks keep it).
  absl::Status Init(
      const std::vector<std::pair<std::string, at::Tensor>>& parameters);
  // Init's steps; LibTorch may throw in them (Init turns that into Status).
  // Lays out bucket `a` over `trainable` (bucket order) and its views; fails
  // when the backend cannot allocate it.
  absl::Status AddBucket(
      const BucketAssignment& a,
      const std::vector<std::pair<std::string, at::Tensor>>& trainable);
  void RegisterHooks();

  // Runs after params_[index]'s gradient was accumulated into .grad.
  void OnGradient(int index);

  // The methods below require mu_.
  std::string StepNameLocked() const;
  // Puts the parameter's accumulated .grad (zeros when undefined) into its
  // bucket; with gradient_as_bucket_view, .grad becomes the view.
  void CopyGradIntoBucket(Param& p);
  void MarkReady(int index, bool in_backward);
  // Launches, in order, the buckets from next_launch_ whose gradients are
  // all ready.
  void LaunchReady(bool in_backward);
  // Hands the bucket to the communication hook, which always issues its
  // collectives, so that ranks stay in step even when preparing the bucket
  // failed here.
  void Launch(Bucket& b, bool in_backward);
  // With a static graph, once the first step is known: the parameters that
  // get no gradient are ready as the step starts.
  void MarkKnownUnusedReady();
  // Keeps the first local failure of the step, reported after the waits so
  // that every rank still issues every collective.
  void KeepFirstError(const absl::Status& s, absl::string_view doing);
  // Gives parameters without a gradient .grad or zeros and launches what is
  // still pending; returns one flag per parameter, set where unused.
  std::vector<char> FillInUnused(std::vector<std::string>* names);
  absl::Status WriteAverages();
  // The timeline of the step just done (steps_ counts it), from the buckets'
  // launches and their collectives' times (reducer_stats.cc).
  void FillStepStats(StepStats* stats) const;
  // Clears the per-step state for the next synchronised step.
  void ResetStep();

  // Drives every bucket's work to the end in rounds (BucketWork::Continue)
  // and waits for `unused_work` when not null; the first failure wins. Runs
  // without mu_: only the training thread touches the buckets' work between
  // launch and ResetStep.
  absl::Status WaitForBuckets(const std::string& step_name,
                              backend::Work* unused_work,
                              absl::Duration* waited);

  // kError's verdict from every rank's unused-parameter flags.
  absl::Status CheckUnused(const std::string& step_name,
                           const at::Tensor& unused_maps) const;
  // Launches the exchange of `unused` flags (kError); null otherwise.
  absl::StatusOr<std::shared_ptr<backend::Work>> ExchangeUnused(
      const std::vector<char>& unused, at::Tensor* unused_maps);
  // Keeps the step's launched collectives for ConfirmLastStep.
  void KeepLaunchedWorks();

  // Whether `grad` is `view` itself: the same memory, shape and strides.
  static bool IsView(const at::Tensor& grad, const at::Tensor& view);

  const backend::SmallCollectives comm_;
  const DdpOptions options_;
  std::shared_ptr<CommHook> hook_;
  bool hook_registered_ = false;
  const std::atomic<bool>& gradient_sync_;
  const at::Device control_device_;

  std::vector<Param> params_;  // Bucketed ones, in bucket order.
  std::vector<Bucket> buckets_;
  std::vector<BucketInfo> bucket_info_;
  StepStats last_stats_;
  // The last synchronised step's allreduces, kept until the next step ends so
  // that ConfirmLastStep can wait for them (and the stall inspector sees them
  // until they finish), with what to call them.
  std::vector<BucketComm::Launched> last_works_;

  mutable std::mutex mu_;
  // A communication failure or a broken invariant: returned by every call.
  absl::Status broken_;
  int64_t steps_ = 0;  // Synchronised steps completed.
  // After "step N" in messages: " (shadowed)" during ShadowSynchronize.
  std::string step_suffix_;
  // world size / divisor (set_divisor), applied at launch.
  double scale_ = 1.0;
  bool launch_in_backward_ = true;
  absl::Duration buffer_broadcast_;
  // Per synchronised step, reset by ResetStep.
  std::vector<char> ready_;
  int next_launch_ = 0;
  bool step_started_ = false;
  absl::Time first_hook_;
  absl::Time last_hook_;
  absl::Time last_launch_;
  absl::Duration hooks_;
  absl::Status hook_error_;
  std::vector<std::string> twice_;
  // static_graph: gradients each parameter received this step, and in the
  // first step (known once static_known_); parameters whose count differs.
  std::vector<int> hook_counts_;
  std::vector<int> expected_hooks_;
  bool static_known_ = false;
  std::vector<std::string> graph_changed_;
};

}  // namespace dtrain::ddp::internal

#endif  // DTRAIN_DIST_DDP_REDUCER_H_
