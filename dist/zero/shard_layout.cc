#include "dist/zero/shard_layout.h"

#include <algorithm>

namespace dtrain::zero {

std::vector<BucketShard> PlanShards(
    const std::vector<std::vector<int64_t>>& bucket_param_numels, int rank,
    int world) {
  std::vector<BucketShard> out;
  for (const std::vector<int64_t>& numels : bucket_param_numels) {
    BucketShard b;
    for (const int64_t n : numels) {
      b.param_offsets.push_back(b.numel);
      b.numel += n;
    }
    b.share = (b.numel + world - 1) / world;
    b.begin = std::min(b.numel, rank * b.share);
    b.length = std::min(b.numel, b.begin + b.share) - b.begin;
    const int64_t end = b.begin + b.length;
    for (size_t p = 0; p < numels.size(); ++p) {
      const int64_t lo = std::max(b.begin, b.param_offsets[p]);
      const int64_t hi = std::min(end, b.param_offsets[p] + numels[p]);
      if (lo >= hi) continue;
      b.pieces.push_back({static_cast<int>(p), lo - b.param_offsets[p],
                          lo - b.begin, hi - lo});
    }
    out.push_back(std::move(b));
  }
  return out;
}

}  // namespace dtrain::zero
