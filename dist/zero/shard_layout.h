// Where each rank's share of DistributedDataParallel's buckets lies, for a
// sharded optimizer (sharded_optimizer.h): every bucket is cut into
// world-size shares of ceil(numel / world) elements, rank r's the r-th (the
// last ones shorter, or empty, where the bucket does not divide), so each
// rank holds 1/N of every bucket and its optimizer state is 1/N of the
// model's within one bucket's rounding. Pure arithmetic: no tensors.
#ifndef DTRAIN_DIST_ZERO_SHARD_LAYOUT_H_
#define DTRAIN_DIST_ZERO_SHARD_LAYOUT_H_

#include <cstdint>
#include <vector>

namespace dtrain::zero {

// A run of one parameter's elements inside a rank's share.
struct ParamPiece {
  int param = 0;             // index into the bucket's parameters
  int64_t param_offset = 0;  // first element, in the flat parameter
  int64_t share_offset = 0;  // where it lands in the share
  int64_t numel = 0;
};

struct BucketShard {
  int64_t numel = 0;  // the bucket's elements
  // Elements per share: the flat bucket is padded to world * share.
  int64_t share = 0;
  // This rank's share: [begin, begin + length) of the bucket; length is
  // share, less for the last shares, 0 past the bucket's end.
  int64_t begin = 0;
  int64_t length = 0;
  // Each parameter's first element in the bucket (bucket order).
  std::vector<int64_t> param_offsets;
  // The parameters' elements in this rank's share, in order.
  std::vector<ParamPiece> pieces;
};

// The shards of `rank` (0 <= rank < world) for buckets whose parameters
// have the given element counts, in bucket order.
std::vector<BucketShard> PlanShards(
    const std::vector<std::vector<int64_t>>& bucket_param_numels, int rank,
    int world);

}  // namespace dtrain::zero

#endif  // DTRAIN_DIST_ZERO_SHARD_LAYOUT_H_
