// A communication hook of one's own (dist/ddp/comm_hook.h): the plain
// allreduce, plus each bucket's gradient 2-norm on this rank before and after
// averaging, to see how far a rank strays from the average. Register it on
// every rank before the first step: ddp->RegisterCommHook(hook).
#ifndef DTRAIN_EXAMPLES_COMM_HOOK_NORM_HOOK_H_
#define DTRAIN_EXAMPLES_COMM_HOOK_NORM_HOOK_H_

#include <memory>
#include <string>
#include <vector>

#include "base/status_macros.h"
#include "dist/ddp/comm_hook.h"

namespace dtrain::examples {

class NormHook : public ddp::CommHook {
 public:
  // Per bucket, as of the last synchronised step.
  std::vector<double> local, averaged;

  std::string name() const override { return "norm"; }
  absl::Status Setup(const std::vector<ddp::GradBucket>& buckets,
                     backend::Backend&) override {
    local.assign(buckets.size(), 0);
    averaged.assign(buckets.size(), 0);
    return absl::OkStatus();
  }
  std::unique_ptr<ddp::BucketWork> Launch(ddp::GradBucket& bucket,
                                          ddp::BucketComm& comm) override {
    local[bucket.index] = bucket.buffer.norm().item<double>();
    auto work =
        comm.AllReduce(bucket.buffer, backend::ReduceOp::kAverage, "allreduce");
    return std::make_unique<Done>(*this, bucket, comm, work);
  }

 private:
  struct Done : ddp::BucketWork {
    Done(NormHook& h, ddp::GradBucket& b, ddp::BucketComm& c,
         std::shared_ptr<backend::Work> w)
        : hook(h), bucket(b), comm(c), work(w) {}
    absl::StatusOr<Progress> Continue() override {  // After backward.
      DTRAIN_RETURN_IF_ERROR(comm.Wait(*work, "allreduce"));
      hook.averaged[bucket.index] = bucket.buffer.norm().item<double>();
      return Progress::kDone;
    }
    NormHook& hook;
    ddp::GradBucket& bucket;
    ddp::BucketComm& comm;
    std::shared_ptr<backend::Work> work;
  };
};

}  // namespace dtrain::examples

#endif  // DTRAIN_EXAMPLES_COMM_HOOK_NORM_HOOK_H_
