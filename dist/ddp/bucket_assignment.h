// How DistributedDataParallel groups gradients into buckets: pure arithmetic
// over sizes, kept apart from LibTorch so that it is cheap to test.
//
// Tensors are taken in the order given (DDP passes parameters in reverse
// registration order, roughly the order backward produces their gradients).
// Tensors with different keys (dtype and device) never share a bucket: each
// key has its own open bucket, as in PyTorch's
// compute_bucket_assignment_by_size. As there, a bucket closes once it
// reaches its cap, so it may exceed the cap by its last tensor. That matters
// for overlap: a large tensor produced early in backward (a classifier's
// weight) closes the bucket it joins and is sent at once, rather than waiting
// in the next bucket for the rest of backward. The first bucket of each key
// has its own (smaller) cap, so that communication starts early in backward.
#ifndef DTRAIN_DIST_DDP_BUCKET_ASSIGNMENT_H_
#define DTRAIN_DIST_DDP_BUCKET_ASSIGNMENT_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace dtrain::ddp::internal {

struct BucketCaps {
  int64_t first_bytes = 0;
  int64_t bytes = 0;
};

// One bucket: indices into the input, in input order, and their total size.
struct BucketAssignment {
  std::vector<int> members;
  int64_t bytes = 0;
};

// Groups tensors of `bytes[i]` bytes and key `keys[i]` (same length) into
// buckets, ordered by their first member. kInvalidArgument for caps that are
// not positive, sizes that are negative, or lengths that differ.
absl::StatusOr<std::vector<BucketAssignment>> AssignBuckets(
    absl::Span<const int64_t> bytes, absl::Span<const int> keys,
    const BucketCaps& caps);

}  // namespace dtrain::ddp::internal

#endif  // DTRAIN_DIST_DDP_BUCKET_ASSIGNMENT_H_
