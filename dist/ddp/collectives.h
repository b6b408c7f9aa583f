// How DistributedDataParallel's internals use the backend: through the
// SmallCollectives handle the trainer shares
// (dist/backend/small_collectives.h), with every error starting "[rank R] ddp:
// " and waits bounded by DdpOptions::timeout. Shared by the reducer, the model
// sync and SyncBatchNorm so that all of them word their errors the same way.
#ifndef DTRAIN_DIST_DDP_COLLECTIVES_H_
#define DTRAIN_DIST_DDP_COLLECTIVES_H_

#include <string>

#include "absl/time/time.h"
#include "dist/backend/backend.h"
#include "dist/backend/small_collectives.h"

namespace dtrain::ddp::internal {

// "[rank 1] ddp: ", in front of every error DDP returns.
std::string ErrorPrefix(int rank);

// DDP's handle: ErrorPrefix, DdpOptions::timeout; the trainer-side helpers
// run on the CPU (DDP passes its control device to GatherBySum itself).
backend::SmallCollectives DdpCollectives(backend::Backend& backend,
                                         absl::Duration timeout);

}  // namespace dtrain::ddp::internal

#endif  // DTRAIN_DIST_DDP_COLLECTIVES_H_
