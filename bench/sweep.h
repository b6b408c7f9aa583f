// What the nccl-tests-style drivers (nccl_allreduce_bandwidth,
// shm_allreduce_bandwidth) share: message sizes given as "1M" on the command
// line, the sweep of sizes, and the bus-bandwidth convention.
#ifndef DTRAIN_BENCH_SWEEP_H_
#define DTRAIN_BENCH_SWEEP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dtrain::bench {

// Parses flag `--<flag>=<given>`: "1M" -> 1048576 (suffix K, M or G, binary
// units). Positive multiples of 4 bytes (float32 elements) only; the error
// names the flag and the value.
absl::StatusOr<int64_t> ParseBytes(const std::string& flag,
                                   const std::string& given);

// min, min * factor, ... up to max inclusive. kInvalidArgument unless
// min <= max and factor >= 2.
absl::StatusOr<std::vector<int64_t>> SweepSizes(int64_t min_bytes,
                                                int64_t max_bytes, int factor);

// busbw = algbw * 2(n-1)/n for allreduce, as nccl-tests define it: the rate
// each rank's link carries in a ring. 0 for one rank.
double AllReduceBusFactor(int world_size);

}  // namespace dtrain::bench

#endif  // DTRAIN_BENCH_SWEEP_H_
