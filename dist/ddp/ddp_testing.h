// Test helpers for DistributedDataParallel: Gloo ranks as threads on
// 127.0.0.1 (or shared-memory ranks), a small MLP whose parameters keep
// PyTorch's names, and a Backend wrapper that records what DDP issues and can
// fail a chosen bucket. Header-only: each test is one LibTorch translation
// unit.
#ifndef DTRAIN_DIST_DDP_DDP_TESTING_H_
#define DTRAIN_DIST_DDP_DDP_TESTING_H_

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "dist/backend/backend.h"
#include "dist/backend/backend_testing.h"
#include "dist/backend/gloo/gloo_backend.h"
#include "dist/backend/hierarchical/hierarchical_backend.h"
#include "dist/backend/membership.h"
#include "dist/backend/shm/shm_backend.h"

namespace dtrain::ddp::testing {

// Every collective in these tests is bounded by this, so a broken test fails
// instead of hanging.
inline constexpr absl::Duration kTestTimeout = absl::Seconds(60);

// Rank `rank` of `world_size` over `store`, collectives bounded by `timeout`.
inline backend::Membership Group(int rank, int world_size,
                                 std::shared_ptr<store::Store> store,
                                 absl::Duration timeout) {
  backend::Membership m;
  m.rank = rank;
  m.world_size = world_size;
  m.store = std::move(store);
  m.timeout = timeout;
  return m;
}

inline backend::testing::BackendFactory Gloo(
    absl::Duration timeout = kTestTimeout) {
  return [=](int rank, int world_size, std::shared_ptr<store::Store> store) {
    backend::GlooBackendOptions o;
    o.hostname = "127.0.0.1";
    return backend::CreateGlooBackend(
        Group(rank, world_size, std::move(store), timeout), o);
  };
}

// A deterministic input batch, different per rank.
inline at::Tensor Input(int rank, int64_t batch = 5, int64_t features = 8) {
  return at::arange(batch * features, at::kFloat)
      .reshape({batch, features})
      .mul(0.37 * (rank + 1))
      .sin();
}

inline at::Tensor Loss(const at::Tensor& out) { return out.pow(2).mean(); }

// The shared-memory backend, the same way.
inline backend::testing::BackendFactory Shm(
    absl::Duration timeout = kTestTimeout) {
  return [=](int rank, int world_size, std::shared_ptr<store::Store> store) {
    return backend::CreateShmBackend(
        Group(rank, world_size, std::move(store), timeout));
  };
}

// Ranks as threads on two "hosts" (the first half and the rest): shared
// memory within each, Gloo between the two leaders.
inline backend::testing::BackendFactory TwoHosts(
    absl::Duration timeout = kTestTimeout) {
  return [=](int rank, int world_size, std::shared_ptr<store::Store> store) {
    backend::HierarchicalBackendOptions o;
    o.gloo.hostname = "127.0.0.1";
    o.host_key = rank < (world_size + 1) / 2 ? "host a" : "host b";
    return backend::CreateHierarchicalBackend(
        Group(rank, world_size, std::move(store), timeout), o);
  };
}

// in -> hidden -> hidden -> out with tanh between; optional layers that the
// forward can skip, for unused-parameter tests.
struct MlpOptions {
  int64_t in = 8;
  int64_t hidden = 16;
  int64_t out = 4;
  // Registered after fc3; used by forward only when asked.
  bool with_extra = false;
  // Registered last; never used by forward.
  bool with_unused = false;
};

class MlpImpl : public torch::nn::Module {
 public:
  explicit MlpImpl(const MlpOptions& o = {}) {
    fc1 = register_module("fc1", torch::nn::Linear(o.in, o.hidden));
    fc2 = register_module("fc2", torch::nn::Linear(o.hidden, o.hidden));
    fc3 = register_module("fc3", torch::nn::Linear(o.hidden, o.out));
    if (o.with_extra)
      extra = register_module("extra", torch::nn::Linear(o.out, o.out));
    if (o.with_unused)
      unused = register_module("unused", torch::nn::Linear(o.out, o.out));
  }

  at::Tensor forward(const at::Tensor& x, bool use_extra = false) {
    at::Tensor h = fc3(fc2(fc1(x).tanh()).tanh());
    return use_extra ? h + extra(h) : h;
  }

  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
  torch::nn::Linear extra{nullptr}, unused{nullptr};
};
TORCH_MODULE(Mlp);

// Largest absolute difference between same-named parameters (and buffers).
inline double MaxParameterDifference(const torch::nn::Module& a,
                                     const torch::nn::Module& b) {
  double worst = 0;
  const auto pb = b.named_parameters();
  for (const auto& item : a.named_parameters()) {
    worst = std::max(
        worst, (item.value() - pb[item.key()]).abs().max().item<double>());
  }
  const auto bb = b.named_buffers();
  for (const auto& item : a.named_buffers()) {
    worst = std::max(
        worst, (item.value().to(at::kDouble) - bb[item.key()].to(at::kDouble))
                   .abs()
                   .max()
                   .item<double>());
  }
  return worst;
}

// What one rank's backend was asked to do, in order.
class EventLog {
 public:
  void Add(std::string event) {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(event));
  }
  std::vector<std::string> events() {
    std::lock_guard<std::mutex> lock(mu_);
    return events_;
  }
  // Forgets what was logged, e.g. the bucket allocations of creation.
  void Clear() {
    std::lock_guard<std::mutex> lock(mu_);
    events_.clear();
  }

 private:
  std::mutex mu_;
  std::vector<std::string> events_;
};

class FailedWork : public backend::Work {
 public:
  explicit FailedWork(absl::Status status) : status_(std::move(status)) {}
  absl::Status Wait(absl::Duration) override { return status_; }
  bool IsCompleted() override { return true; }
  absl::Status status() override { return status_; }

 private:
  absl::Status status_;
};

// Forwards to `inner`, logging "allreduce <label>", "broadcast", "allgather",
// "allocate buffer";
// an allreduce labelled `fail_label` is not issued and fails at once.
class RecordingBackend : public backend::Backend {
 public:
  RecordingBackend(backend::Backend& inner, EventLog* log,
                   std::string fail_label = "")
      : inner_(inner), log_(log), fail_label_(std::move(fail_label)) {}

  absl::string_view name() const override { return inner_.name(); }
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }

  std::shared_ptr<backend::Work> AllReduce(at::Tensor tensor,
                                           backend::ReduceOp op,
                                           absl::string_view label) override {
    log_->Add(absl::StrCat("allreduce ", label));
    if (!fail_label_.empty() && label == fail_label_) {
      return std::make_shared<FailedWork>(absl::UnavailableError(
          absl::StrCat("[rank ", rank(), "] injected failure (", label, ")")));
    }
    return inner_.AllReduce(std::move(tensor), op, label);
  }
  void Abort(const absl::Status& reason) override { inner_.Abort(reason); }
  std::shared_ptr<backend::Work> Broadcast(at::Tensor tensor,
                                           int root) override {
    log_->Add("broadcast");
    return inner_.Broadcast(std::move(tensor), root);
  }
  std::shared_ptr<backend::Work> AllGather(std::vector<at::Tensor> outputs,
                                           at::Tensor input) override {
    log_->Add("allgather");
    return inner_.AllGather(std::move(outputs), std::move(input));
  }
  std::shared_ptr<backend::Work> ReduceScatter(at::Tensor output,
                                               std::vector<at::Tensor> inputs,
                                               backend::ReduceOp op) override {
    log_->Add("reduce_scatter");
    return inner_.ReduceScatter(std::move(output), std::move(inputs), op);
  }
  std::shared_ptr<backend::Work> Barrier() override {
    log_->Add("barrier");
    return inner_.Barrier();
  }
  absl::StatusOr<at::Tensor> AllocateBuffer(int64_t numel,
                                            at::ScalarType dtype) override {
    log_->Add("allocate buffer");
    return inner_.AllocateBuffer(numel, dtype);
  }

 private:
  backend::Backend& inner_;
  EventLog* log_;
  std::string fail_label_;
};

}  // namespace dtrain::ddp::testing

#endif  // DTRAIN_DIST_DDP_DDP_TESTING_H_
