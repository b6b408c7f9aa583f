// Test helpers for the shm backend's tests: ranks as threads on a backend
// with the given slot size, and values of every magnitude per dtype.
// Header-only.
#ifndef DTRAIN_DIST_BACKEND_SHM_SHM_TESTING_H_
#define DTRAIN_DIST_BACKEND_SHM_SHM_TESTING_H_

#include <ATen/ATen.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/time/time.h"
#include "dist/backend/backend_testing.h"
#include "dist/backend/shm/shm_backend.h"

namespace dtrain::backend::testing {

inline BackendFactory Shm(int64_t slot_bytes = int64_t{4} << 20,
                          absl::Duration timeout = absl::Seconds(60)) {
  return [=](int rank, int world_size, std::shared_ptr<store::Store> store) {
    Membership group;
    group.rank = rank;
    group.world_size = world_size;
    group.store = std::move(store);
    group.timeout = timeout;
    ShmBackendOptions o;
    o.slot_bytes = slot_bytes;
    return CreateShmBackend(group, o);
  };
}

// Deterministic values of every magnitude, different per rank.
inline at::Tensor Values(int64_t n, int rank) {
  return at::sin(at::arange(n, at::kFloat) * 0.37f * (rank + 1)) *
         std::pow(10.0f, rank);
}

// Values for `op` on `dtype` that neither overflow nor round differently
// by accident: sines of every magnitude for floats, 1..3 for integers.
inline at::Tensor OpValues(int64_t n, int rank, at::ScalarType dtype) {
  if (at::isFloatingType(dtype)) return Values(n, rank).to(dtype);
  return (at::arange(n, at::kLong) * 7 + rank).remainder(3).add(1).to(dtype);
}

inline bool SameBytes(const at::Tensor& a, const at::Tensor& b) {
  return a.nbytes() == b.nbytes() &&
         std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

}  // namespace dtrain::backend::testing

#endif  // DTRAIN_DIST_BACKEND_SHM_SHM_TESTING_H_
