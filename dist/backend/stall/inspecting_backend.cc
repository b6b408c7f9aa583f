#include "dist/backend/stall/inspecting_backend.h"

#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace dtrain::backend {
namespace {

// What the works of one backend share: the inspector, and whether a failure
// was explained already. After a failure every later collective fails with
// the same error (backend.h); one report, for the first, says it all.
struct Shared {
  explicit Shared(std::shared_ptr<StallInspector> i)
      : inspector(std::move(i)) {}
  const std::shared_ptr<StallInspector> inspector;
  std::mutex mu;
  bool reported = false;
};

// The inner Work, with the stall report appended to the first failure. It
// does not keep the inspector alive: a handle held past its backend (DDP
// keeps the last step's) must not keep the inspector's thread using a store
// that may be gone; a failure read then comes without the report.
class InspectedWork : public Work {
 public:
  InspectedWork(std::shared_ptr<Work> inner, std::weak_ptr<Shared> shared)
      : inner_(std::move(inner)), shared_(std::move(shared)) {}

  void set_seq(int64_t seq) { seq_ = seq; }

  absl::Status Wait(absl::Duration timeout) override {
    absl::Status s = inner_->Wait(timeout);
    // A short host wait that ran out is polling, not a stall.
    if (!s.ok() && timeout < absl::Seconds(1) && !inner_->IsCompleted())
      return s;
    return Explained(s);
  }
  absl::Status WaitForResult(absl::Duration timeout) override {
    absl::Status s = inner_->WaitForResult(timeout);
    if (!s.ok() && timeout < absl::Seconds(1) && !inner_->IsCompleted())
      return s;
    return Explained(s);
  }
  bool IsCompleted() override { return inner_->IsCompleted(); }
  absl::optional<WorkTimes> times() override { return inner_->times(); }
  absl::Status status() override {
    absl::Status s = inner_->status();
    return inner_->IsCompleted() ? Explained(s) : s;
  }

 private:
  // Argument errors are this rank's own: no report for them.
  absl::Status Explained(const absl::Status& s) {
    if (s.ok() || s.code() == absl::StatusCode::kInvalidArgument) return s;
    std::lock_guard<std::mutex> lock(mu_);
    if (!explained_.ok()) return explained_;
    explained_ = s;
    const std::shared_ptr<Shared> shared = shared_.lock();
    if (shared == nullptr) return explained_;  // The backend is gone.
    {
      std::lock_guard<std::mutex> shared_lock(shared->mu);
      if (shared->reported) return explained_;
      shared->reported = true;
    }
    // A peer whose process has exited is the culprit, not a stall: named
    // once, and not at all where the error already says so (the shm
    // backend's does).
    explained_ = absl::Status(
        s.code(), absl::StrCat(s.message(),
                               shared->inspector->Explain(seq_, s.message())));
    return explained_;
  }

  const std::shared_ptr<Work> inner_;
  const std::weak_ptr<Shared> shared_;
  int64_t seq_ = 0;
  std::mutex mu_;
  absl::Status explained_;
};

class InspectingBackend : public Backend {
 public:
  InspectingBackend(std::unique_ptr<Backend> inner,
                    std::shared_ptr<StallInspector> inspector)
      : inner_(std::move(inner)),
        shared_(std::make_shared<Shared>(std::move(inspector))) {}

  absl::string_view name() const override { return inner_->name(); }
  std::string layout() const override { return inner_->layout(); }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }

  std::shared_ptr<Work> AllReduce(at::Tensor tensor, ReduceOp op,
                                  absl::string_view label) override {
    return Inspect("allreduce", label, [&] {
      return inner_->AllReduce(std::move(tensor), op, label);
    });
  }
  std::shared_ptr<Work> Broadcast(at::Tensor tensor, int root) override {
    return Inspect("broadcast", absl::StrCat("root ", root),
                   [&] { return inner_->Broadcast(std::move(tensor), root); });
  }
  std::shared_ptr<Work> AllGather(std::vector<at::Tensor> outputs,
                                  at::Tensor input) override {
    return Inspect("allgather", "", [&] {
      return inner_->AllGather(std::move(outputs), std::move(input));
    });
  }
  std::shared_ptr<Work> ReduceScatter(at::Tensor output,
                                      std::vector<at::Tensor> inputs,
                                      ReduceOp op) override {
    return Inspect("reduce-scatter", "", [&] {
      return inner_->ReduceScatter(std::move(output), std::move(inputs), op);
    });
  }
  std::shared_ptr<Work> Barrier() override {
    return Inspect("barrier", "", [&] { return inner_->Barrier(); });
  }
  void Abort(const absl::Status& reason) override { inner_->Abort(reason); }
  absl::StatusOr<at::Tensor> AllocateBuffer(int64_t numel,
                                            at::ScalarType dtype) override {
    return inner_->AllocateBuffer(numel, dtype);
  }

 private:
  template <typename F>
  std::shared_ptr<Work> Inspect(absl::string_view op, absl::string_view label,
                                F issue) {
    // Issued and numbered under one lock, so that callers on several threads
    // get the numbers in the order the backend got the collectives.
    std::lock_guard<std::mutex> lock(mu_);
    std::shared_ptr<Work> inner = issue();
    auto work = std::make_shared<InspectedWork>(inner, shared_);
    // The inner Work: the wrapper holds the inspector.
    work->set_seq(shared_->inspector->Issued(op, label, std::move(inner)));
    return work;
  }

  const std::unique_ptr<Backend> inner_;
  const std::shared_ptr<Shared> shared_;
  std::mutex mu_;
};

}  // namespace

std::unique_ptr<Backend> WithStallInspection(std::unique_ptr<Backend> inner,
                                             StallInspectorOptions options) {
  options.rank = inner->rank();
  options.size = inner->size();
  auto inspector = std::make_shared<StallInspector>(std::move(options));
  return std::make_unique<InspectingBackend>(std::move(inner),
                                             std::move(inspector));
}

}  // namespace dtrain::backend
