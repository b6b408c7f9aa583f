#include "dist/ddp/comm_hook.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace dtrain::ddp {

std::shared_ptr<backend::Work> BucketComm::AllReduce(at::Tensor tensor,
                                                     backend::ReduceOp op,
                                                     absl::string_view stage) {
  Launched l;
  l.what = absl::StrCat(what_, " ", stage);
  // Before the call: the backend's thread may start it before it returns.
  l.launched_at = absl::Now();
  // The backend's own messages say "allreduce" already.
  l.work = comm_->backend().AllReduce(
      std::move(tensor), op,
      stage == "allreduce" ? label_ : absl::StrCat(label_, " ", stage));
  launched_.push_back(l);
  return l.work;
}

std::shared_ptr<backend::Work> BucketComm::ReduceScatter(
    at::Tensor output, std::vector<at::Tensor> inputs, backend::ReduceOp op,
    absl::string_view stage) {
  Launched l;
  l.what = absl::StrCat(what_, " ", stage);
  l.launched_at = absl::Now();
  l.work =
      comm_->backend().ReduceScatter(std::move(output), std::move(inputs), op);
  launched_.push_back(l);
  return l.work;
}

const BucketComm::Launched* BucketComm::Find(const backend::Work& work) const {
  for (const Launched& l : launched_) {
    if (l.work.get() == &work) return &l;
  }
  return nullptr;
}

absl::Status BucketComm::Wait(backend::Work& work, absl::string_view stage) {
  const Launched* l = Find(work);
  return comm_->Wait(work, absl::StrCat(what_, " ", stage),
                     l != nullptr ? l->launched_at : absl::Now());
}

}  // namespace dtrain::ddp
