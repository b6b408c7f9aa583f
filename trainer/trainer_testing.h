// Helpers for the trainer's tests: Train with ranks as threads (Gloo over an
// in-memory store) on a small synthetic dataset, and parameter comparisons.
// Test-only.
#ifndef DTRAIN_TRAINER_TRAINER_TESTING_H_
#define DTRAIN_TRAINER_TRAINER_TESTING_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "dist/backend/backend.h"
#include "dist/store/store.h"
#include "trainer/trainer.h"

namespace dtrain::trainer::testing {

// A Gloo backend for one rank thread (backend::testing::RunRanks' factory).
absl::StatusOr<std::unique_ptr<backend::Backend>> Gloo(
    int rank, int world_size, std::shared_ptr<store::Store> store);

// The ConvNet on 384 synthetic 12x12 training examples and 101 validation
// ones, batch 16, 2 epochs, resolved.
TrainOptions SmallRun();

// A fresh, empty directory under the test's temporary directory.
std::string TempDir(const std::string& name);

// Runs Train on `world_size` threads; returns each rank's result. Rank 0
// logs to `log` (when not null).
std::vector<absl::StatusOr<TrainResult>> TrainOnRanks(
    const TrainOptions& options, int world_size, std::ostream* log = nullptr,
    int cuda_device = -1);

// Forwards to `inner`, except that its allreduce number `fail_at` (counting
// from 1; 0: none) is not issued and fails at once with `status`, as a rank
// that died there (kUnavailable, which an elastic run goes on from) or failed
// on its own (kInternal) would leave it.
class FailingBackend : public backend::Backend {
 public:
  FailingBackend(backend::Backend& inner, int fail_at, absl::Status status)
      : inner_(inner), fail_at_(fail_at), status_(std::move(status)) {}
  absl::string_view name() const override { return inner_.name(); }
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  std::shared_ptr<backend::Work> AllReduce(at::Tensor tensor,
                                           backend::ReduceOp op,
                                           absl::string_view label) override;
  void Abort(const absl::Status& reason) override { inner_.Abort(reason); }
  std::shared_ptr<backend::Work> Broadcast(at::Tensor tensor,
                                           int root) override {
    return inner_.Broadcast(std::move(tensor), root);
  }
  std::shared_ptr<backend::Work> AllGather(std::vector<at::Tensor> outputs,
                                           at::Tensor input) override {
    return inner_.AllGather(std::move(outputs), std::move(input));
  }
  std::shared_ptr<backend::Work> ReduceScatter(at::Tensor output,
                                               std::vector<at::Tensor> inputs,
                                               backend::ReduceOp op) override {
    return inner_.ReduceScatter(std::move(output), std::move(inputs), op);
  }
  std::shared_ptr<backend::Work> Barrier() override { return inner_.Barrier(); }
  absl::StatusOr<at::Tensor> AllocateBuffer(int64_t numel,
                                            at::ScalarType dtype) override {
    return inner_.AllocateBuffer(numel, dtype);
  }

 private:
  backend::Backend& inner_;
  const int fail_at_;
  const absl::Status status_;
  int allreduces_ = 0;
};

// TrainOnRanks with each rank's context adjusted by `configure` (its log is
// quiet unless it sets one), and rank r's allreduce number fail_at(r) failing
// with `failure` (FailingBackend; fail_at empty or 0: none). A rank whose
// Train fails aborts its backend, as train's main does.
std::vector<absl::StatusOr<TrainResult>> TrainOnRanks(
    const TrainOptions& options, int world_size,
    const std::function<void(int rank, TrainContext& context)>& configure,
    const std::function<int(int rank)>& fail_at = {},
    const absl::Status& failure = absl::UnavailableError("injected failure"));

// The model's parameters and buffers, in registration order.
std::vector<at::Tensor> Parameters(const TrainResult& r);

// Every parameter and buffer equal, bit for bit (a gtest expectation).
void ExpectSameParameters(const TrainResult& a, const TrainResult& b);

}  // namespace dtrain::trainer::testing

#endif  // DTRAIN_TRAINER_TRAINER_TESTING_H_
