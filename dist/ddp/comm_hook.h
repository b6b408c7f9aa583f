// Communication hooks: how DistributedDataParallel turns each bucket of
// local gradients into their average over ranks (PyTorch's
// register_comm_hook). The built-in allreduce is one hook among others
// (dist/ddp/hooks/): float16 and bfloat16 compression, PowerSGD, local SGD.
//
//   // Before the first synchronised backward, on every rank:
//   DTRAIN_RETURN_IF_ERROR(ddp->RegisterCommHook(
//       std::make_shared<hooks::Fp16CompressHook>()));
//
// A hook launches a bucket's collectives as soon as the bucket's gradients
// are ready, during backward, and returns at once with a BucketWork; DDP's
// SynchronizeGradients then drives every bucket's BucketWork to completion
// in rounds (see BucketWork::Continue), so a hook with several stages
// (PowerSGD: allreduce P, then Q) issues them in the same order on every
// rank and overlaps one bucket's stage with the next bucket's.
//
//   class MyWork : public BucketWork {
//    public:
//     MyWork(BucketComm& comm, std::shared_ptr<backend::Work> w)
//         : comm_(comm), work_(std::move(w)) {}
//     absl::StatusOr<Progress> Continue() override {
//       DTRAIN_RETURN_IF_ERROR(comm_.Wait(*work_, "allreduce"));
//       return Progress::kDone;
//     }
//    ...
//   };
//   std::unique_ptr<BucketWork> MyHook::Launch(GradBucket& bucket,
//                                              BucketComm& comm) {
//     return std::make_unique<MyWork>(
//         comm, comm.AllReduce(bucket.buffer(), ReduceOp::kAverage,
//                              "allreduce"));
//   }
//
// The ordering contract (dist/backend/backend.h) is the hook's to keep:
// every rank's hook must issue the same collectives, with the same shapes,
// in the same order, in Launch and in each round of Continue. A hook that
// fails locally (a LibTorch error) still issues its collectives and reports
// the failure from Continue, so that the other ranks are not left waiting.
// After a failed Wait it may stop issuing its later stages: the backend is
// broken then, and so is DDP, for every rank.
//
// Uneven inputs (join.h): on a rank that has joined, DDP launches every
// bucket zeroed, standing in for the active ranks' step, so every rank still
// issues the same collectives. With divide_by_initial_world_size=false a
// bucket arrives scaled by world size / active ranks, which a hook that
// averages over the world size turns into the active ranks' average.
//
// Thread safety: Launch runs on LibTorch's autograd threads or the training
// thread, one call at a time (DDP holds its lock); Continue and the state
// methods run on the training thread. A hook object serves one DDP.
// Lifetimes: DDP owns the hook (a shared_ptr) for its lifetime; a
// BucketWork lives until its bucket is done, and the GradBucket and
// BucketComm it was launched with outlive it.
#ifndef DTRAIN_DIST_DDP_COMM_HOOK_H_
#define DTRAIN_DIST_DDP_COMM_HOOK_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "dist/backend/backend.h"
#include "dist/backend/small_collectives.h"

namespace dtrain::ddp {

// One bucket as a hook sees it (PyTorch's GradBucket). Made by DDP at
// construction; the tensors stay the same objects for DDP's lifetime.
struct GradBucket {
  int index = 0;
  int num_buckets = 0;
  bool is_last() const { return index == num_buckets - 1; }
  // The flat gradients, parameters in bucket order (reverse registration
  // order). When Launch is called it holds this rank's local gradients; the
  // hook leaves their average over ranks here by the time its work answers
  // kDone. With gradient_as_bucket_view it is the parameters' .grad.
  at::Tensor buffer;
  // The bucket's allocation, `buffer` its first elements: world_size equal
  // shares of it with DdpOptions::pad_buckets_to_world_size, `buffer` itself
  // otherwise. Past `buffer`, zero unless a hook writes there.
  at::Tensor padded;
  // Per parameter: the parameter, its name and its slice of `buffer`
  // shaped like it.
  std::vector<at::Tensor> parameters;
  std::vector<std::string> names;
  std::vector<at::Tensor> gradients;
  // "bucket 3 (2.1 MiB, 14 parameters fc1.bias..conv2.weight)".
  std::string description;
};

// What a hook communicates through, one per bucket and step: the backend's
// collectives, recorded so that DDP's ConfirmLastStep waits for them and the
// step's timeline shows them, and waits bounded by DdpOptions::timeout whose
// errors name the rank, step, bucket and stage. Made by DDP.
class BucketComm {
 public:
  // `label`: the bucket in the backend's messages ("bucket 3").
  BucketComm(const backend::SmallCollectives& comm, std::string label)
      : comm_(&comm), label_(std::move(label)) {}

  backend::Backend& backend() const { return comm_->backend(); }
  int rank() const { return comm_->rank(); }
  int world_size() const { return comm_->world_size(); }

  // Launches an allreduce of `tensor` (the bucket's buffer or the hook's own
  // tensor, on the bucket's device). `stage` names it in errors: "fp16
  // allreduce", "P allreduce".
  std::shared_ptr<backend::Work> AllReduce(at::Tensor tensor,
                                           backend::ReduceOp op,
                                           absl::string_view stage);
  // Launches a reduce-scatter (Backend::ReduceScatter), recorded the same
  // way: a sharded optimizer's hook averages only this rank's share.
  std::shared_ptr<backend::Work> ReduceScatter(at::Tensor output,
                                               std::vector<at::Tensor> inputs,
                                               backend::ReduceOp op,
                                               absl::string_view stage);

  // Waits for `work` (launched through this object) within
  // DdpOptions::timeout. Errors read "[rank 1] ddp: step 12, bucket 3 (...)
  // <stage> failed after 1.2s: <backend message>".
  absl::Status Wait(backend::Work& work, absl::string_view stage);

  // For DDP: what was launched this step, in order.
  struct Launched {
    std::shared_ptr<backend::Work> work;
    std::string what;
    absl::Time launched_at;
  };
  const std::vector<Launched>& launched() const { return launched_; }
  // A new step: `what` starts the waits' errors ("step 12, bucket 3 (...)").
  void Reset(std::string what) {
    what_ = std::move(what);
    launched_.clear();
  }

 private:
  // The launch record of `work`, or null.
  const Launched* Find(const backend::Work& work) const;

  const backend::SmallCollectives* comm_;
  std::string label_;
  std::string what_;  // "step 12, bucket 3 (...)".
  std::vector<Launched> launched_;
};

// A bucket's communication under way.
class BucketWork {
 public:
  enum class Progress { kDone, kMore };
  virtual ~BucketWork() = default;

  // Called by SynchronizeGradients on the training thread: once for every
  // bucket, in bucket order, then again in bucket order for those that
  // answered kMore, and so on until every bucket answered kDone. kDone: the
  // average is in the bucket's buffer (on CUDA, ordered before later work on
  // the current stream, as backend::Work::Wait promises). kMore: it launched
  // its next stage. An error ends this bucket; DDP finishes the others and
  // then fails the step with the first error.
  virtual absl::StatusOr<Progress> Continue() = 0;
};

class CommHook {
 public:
  virtual ~CommHook() = default;

  // "allreduce", "fp16", "powersgd": in messages and statistics.
  virtual std::string name() const = 0;

  // Called once, by RegisterCommHook, with DDP's buckets. A collective (every
  // rank calls it in the same order): it may allocate long-lived buffers
  // with Backend::AllocateBuffer.
  virtual absl::Status Setup(const std::vector<GradBucket>& buckets,
                             backend::Backend& backend) {
    (void)buckets;
    (void)backend;
    return absl::OkStatus();
  }

  // Bytes a step puts on the wire for `bucket` once the hook is in its steady
  // state: BucketInfo::communicated_bytes.
  virtual int64_t CommunicatedBytes(const GradBucket& bucket) const {
    return bucket.buffer.numel() *
           static_cast<int64_t>(bucket.buffer.element_size());
  }

  // Called once per bucket and synchronised step, in bucket order, as soon as
  // the bucket's gradients are in its buffer (see the file comment for the
  // thread). Launches the bucket's first collectives and returns without
  // waiting for them.
  virtual std::unique_ptr<BucketWork> Launch(GradBucket& bucket,
                                             BucketComm& comm) = 0;

  // What a checkpoint keeps for an exact resume, as named tensors; empty for
  // a stateless hook. State is what every rank holds alike (step counters,
  // PowerSGD's Q matrices and random state): a checkpoint keeps rank 0's and
  // every rank loads it. RankState is what differs between ranks (PowerSGD's
  // error feedback): a checkpoint keeps every rank's, and each rank loads its
  // own. Both are read after SynchronizeGradients, on the training thread;
  // names are not empty and hold no '/' (checkpoints qualify per-rank names
  // with one).
  virtual std::vector<std::pair<std::string, at::Tensor>> State() const {
    return {};
  }
  // Every rank returns the same names, shapes and dtypes in the same order
  // (after the same steps with the same buckets and options): gathering them
  // is a collective sized by them.
  virtual std::vector<std::pair<std::string, at::Tensor>> RankState() const {
    return {};
  }
  // Restores what State returned: after RegisterCommHook (state may depend
  // on Setup's plan for the buckets), before the first synchronised step.
  // The tensors may be on the CPU whatever the buckets' device.
  // kInvalidArgument when it does not fit this hook and these buckets.
  virtual absl::Status LoadState(
      const std::vector<std::pair<std::string, at::Tensor>>& state) {
    if (state.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(
        "this communication hook keeps no state, but the checkpoint has some");
  }
  // Restores what RankState returned on this rank (not collective), after
  // LoadState when both are called; not called when the checkpoint's
  // per-rank state cannot be mapped to these ranks (another world size),
  // which leaves the fresh per-rank state. As LoadState otherwise.
  virtual absl::Status LoadRankState(
      const std::vector<std::pair<std::string, at::Tensor>>& state) {
    if (state.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(
        "this communication hook keeps no per-rank state, but the checkpoint "
        "has some");
  }
};

}  // namespace dtrain::ddp

#endif  // DTRAIN_DIST_DDP_COMM_HOOK_H_
