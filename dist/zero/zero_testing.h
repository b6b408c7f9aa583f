// Test helpers for ZeRO (sharded_optimizer.h) and its checkpoints.
#ifndef DTRAIN_DIST_ZERO_ZERO_TESTING_H_
#define DTRAIN_DIST_ZERO_ZERO_TESTING_H_

#include "dist/ddp/ddp.h"
#include "dist/ddp/ddp_testing.h"

namespace dtrain::zero::testing {

// DDP options with small buckets of uneven sizes for ddp::testing::Mlp, so
// that there are several buckets and shares cut through parameters (the
// buckets do not divide by 3 or 4), padded for stage 2.
inline ddp::DdpOptions SmallBuckets() {
  ddp::DdpOptions o;
  o.first_bucket_cap_bytes = 600;
  o.bucket_cap_bytes = 600;
  o.pad_buckets_to_world_size = true;
  o.timeout = ddp::testing::kTestTimeout;
  return o;
}

}  // namespace dtrain::zero::testing

#endif  // DTRAIN_DIST_ZERO_ZERO_TESTING_H_
