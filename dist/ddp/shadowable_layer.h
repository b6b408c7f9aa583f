// A layer whose forward and backward issue collectives of their own
// (SyncBatchNorm's statistics allreduces), seen from Join (join.h): while
// ranks that ran out of inputs shadow the others' iterations,
// DistributedDataParallel finds such layers in its module and issues their
// collectives on the joined rank, contributing nothing (count 0, zero sums),
// in the order an active rank's forward and backward issue them.
//
// DDP learns that order from the layers themselves: each one tells its
// observer of every forward that communicated, in call order, and whether a
// backward allreduce will follow. Autograd runs backward on one thread per
// device in decreasing order of node creation, so the backward allreduces
// come in the reverse order of their forwards (sync_batch_norm.h argues why
// the order is the same on every rank).
//
// Thread safety: the layer calls its observer from the thread running its
// forward; set_observer and the Shadow methods belong to the training
// thread, never during a forward or backward.
#ifndef DTRAIN_DIST_DDP_SHADOWABLE_LAYER_H_
#define DTRAIN_DIST_DDP_SHADOWABLE_LAYER_H_

#include <string>

#include "absl/status/status.h"

namespace dtrain::ddp {

class ShadowableLayer {
 public:
  class Observer {
   public:
    virtual ~Observer() = default;
    // `layer`'s forward issued its collective; `backward_follows`: its
    // backward will issue another (the statistics require grad).
    virtual void OnForward(ShadowableLayer& layer, bool backward_follows) = 0;
  };

  virtual ~ShadowableLayer() = default;

  // "layer1.0.bn1", in errors.
  virtual std::string ShadowName() const = 0;
  // Whether the layer can communicate at all (it has a backend of 2+ ranks);
  // a training forward then does.
  virtual bool Communicates() const = 0;
  // The collective of one forward, and of one backward, with this rank
  // contributing nothing. Errors name the layer, the pass and how long.
  virtual absl::Status ShadowForward() = 0;
  virtual absl::Status ShadowBackward() = 0;
  // Null: none. The observer must outlive its registration.
  virtual void set_observer(Observer* observer) = 0;
};

}  // namespace dtrain::ddp

#endif  // DTRAIN_DIST_DDP_SHADOWABLE_LAYER_H_
