// The reducer of DistributedDataParallel: flat gradient buckets, the autograd
// hooks that fill them during backward, each bucket's allreduce (as float16
// with fp16 compression) launched in bucket order, the waits, the averages
// written back into .grad, no_sync and unused parameters, and the per-step
// statistics. PyTorch's reducer.cpp plays the same part.
//
// Call order: Create allocates each CPU bucket's communicated tensor through
// Backend::AllocateBuffer (a collective on the shm backend), one per bucket
// in bucket order, identical on every rank. A synchronised backward launches
// bucket allreduces from the hooks, and Synchronize launches the rest and
// waits, so every rank must run them in the same sequence (see ddp.h).
//
// Thread safety: the hooks may run on LibTorch's autograd threads; the state
// they touch is guarded by one mutex, which Synchronize releases while it
// waits. The other methods belong to the training thread and must not run
// concurrently with backward.
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
#include "dist/ddp/bucket_assignment.h"
#include "dist/ddp/collectives.h"
#include "dist/ddp/ddp_types.h"

namespace dtrain::ddp::internal {

class Reducer {
 public:
  // Buckets `parameters` (name and tensor, in registration order; bucketed in
  // reverse) by `options`' caps and registers a gradient hook on each.
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

 private:
  struct Param {
    std::string name;
    at::Tensor tensor;
    int bucket = -1;
    // The parameter's slice of its bucket, shaped like the parameter.
    at::Tensor view;
    bool hooked = false;
    unsigned hook = 0;
  };

  struct Bucket {
    std::vector<int> params;  // Indices into params_.
    at::Tensor flat;
    // What is allreduced: `flat`, or its float16 copy with fp16 compression.
    // Allocated by the backend (AllocateBuffer) for CPU buckets.
    at::Tensor comm;
    bool compressed = false;
    std::string label;        // "bucket 3", for the backend's messages.
    std::string description;  // "bucket 3 (2.1 MiB, 14 parameters a..b)".
    // Per step.
    int pending = 0;
    std::shared_ptr<backend::Work> work;
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

  // The gradient hook of params_[index].
  void OnGradient(int index, const at::Tensor& grad);

  // The methods below require mu_.
  std::string StepNameLocked() const;
  void MarkReady(int index, bool in_backward);
  // Always issues the allreduce, so that ranks stay in step even when
  // preparing the bucket failed here.
  void Launch(Bucket& b, bool in_backward);
  // Keeps the first local failure of the step, reported after the waits so
  // that every rank still issues every collective.
  void KeepFirstError(const absl::Status& s, absl::string_view doing);
  // Gives parameters without a gradient .grad or zeros and launches what is
  // still pending; returns one flag per parameter, set where unused.
  std::vector<char> FillInUnused(std::vector<std::string>* names);
  absl::Status WriteAverages();
  // Clears the per-step state for the next synchronised step.
  void ResetStep();

  // Waits for every bucket (and `unused_work` when not null) in launch order;
  // the first failure wins. Runs without mu_: only the training thread
  // touches the buckets' work between launch and ResetStep.
  absl::Status WaitForBuckets(const std::string& step_name,
                              backend::Work* unused_work,
                              absl::Duration* waited);

  // kError's verdict from every rank's unused-parameter flags.
  absl::Status CheckUnused(const std::string& step_name,
                           const at::Tensor& unused_maps) const;

  const backend::SmallCollectives comm_;
  const DdpOptions options_;
  const std::atomic<bool>& gradient_sync_;
  const at::Device control_device_;

  std::vector<Param> params_;  // Bucketed ones, in bucket order.
  std::vector<Bucket> buckets_;
  std::vector<BucketInfo> bucket_info_;
  StepStats last_stats_;
  // The last synchronised step's allreduces, kept until the next step ends so
  // that ConfirmLastStep can wait for them (and the stall inspector sees them
  // until they finish), with what to call them.
  struct Launched {
    std::shared_ptr<backend::Work> work;
    std::string what;
    absl::Time launched_at;
  };
  std::vector<Launched> last_works_;

  mutable std::mutex mu_;
  // A communication failure or a broken invariant: returned by every call.
  absl::Status broken_;
  int64_t steps_ = 0;  // Synchronised steps completed.
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
};

}  // namespace dtrain::ddp::internal

#endif  // DTRAIN_DIST_DDP_REDUCER_H_
