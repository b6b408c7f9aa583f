// Helpers for the trainer's tests: Train with ranks as threads (Gloo over an
// in-memory store) on a small synthetic dataset, and parameter comparisons.
// Test-only.
#ifndef DTRAIN_TRAINER_TRAINER_TESTING_H_
#define DTRAIN_TRAINER_TRAINER_TESTING_H_

#include <ATen/core/Tensor.h>

#include <memory>
#include <ostream>
#include <string>
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

// The model's parameters and buffers, in registration order.
std::vector<at::Tensor> Parameters(const TrainResult& r);

// Every parameter and buffer equal, bit for bit (a gtest expectation).
void ExpectSameParameters(const TrainResult& a, const TrainResult& b);

}  // namespace dtrain::trainer::testing

#endif  // DTRAIN_TRAINER_TRAINER_TESTING_H_
