// Which of a module's ShadowableLayers communicated in its last iteration,
// in which order: what DistributedDataParallel's shadow of an iteration
// replays on a joined rank (join.h). It observes the layers' forwards (see
// shadowable_layer.h for why the backwards then come in reverse order).
//
// Thread safety: as ShadowableLayer's observer, the forward's thread; the
// training thread otherwise, not during a forward. Lifetimes: the layers
// must outlive the object while it observes them (Observe(false) or the
// destructor ends that).
#ifndef DTRAIN_DIST_DDP_LAYER_ORDER_H_
#define DTRAIN_DIST_DDP_LAYER_ORDER_H_

#include <vector>

#include "dist/ddp/shadowable_layer.h"

namespace dtrain::ddp::internal {

class LayerOrder : public ShadowableLayer::Observer {
 public:
  struct Entry {
    ShadowableLayer* layer = nullptr;
    // Its backward communicates too.
    bool backward = false;
  };

  // `layers` in registration order.
  explicit LayerOrder(std::vector<ShadowableLayer*> layers)
      : layers_(std::move(layers)) {}
  ~LayerOrder() override { Observe(false); }
  LayerOrder(const LayerOrder&) = delete;
  LayerOrder& operator=(const LayerOrder&) = delete;

  // Registers (or removes) this object as every layer's observer.
  void Observe(bool on);
  bool empty() const { return layers_.empty(); }
  // Whether any layer can communicate.
  bool AnyCommunicates() const;

  void OnForward(ShadowableLayer& layer, bool backward_follows) override {
    current_.push_back({&layer, backward_follows});
  }
  // An iteration starts: the forwards recorded since the last call, if any,
  // become the order to shadow.
  void NextIteration();
  // The order to shadow: the last iteration that had forwards; before any,
  // every layer that can communicate, in registration order, each with a
  // backward (a guess: right for models that call each layer once, in
  // registration order, with gradients).
  std::vector<Entry> Order() const;

 private:
  std::vector<ShadowableLayer*> layers_;
  std::vector<Entry> current_;
  std::vector<Entry> last_;
};

}  // namespace dtrain::ddp::internal

#endif  // DTRAIN_DIST_DDP_LAYER_ORDER_H_
