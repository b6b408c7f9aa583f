#include "dist/ddp/layer_order.h"

#include <utility>

namespace dtrain::ddp::internal {

void LayerOrder::Observe(bool on) {
  for (ShadowableLayer* layer : layers_)
    layer->set_observer(on ? this : nullptr);
}

bool LayerOrder::AnyCommunicates() const {
  for (const ShadowableLayer* layer : layers_) {
    if (layer->Communicates()) return true;
  }
  return false;
}

void LayerOrder::NextIteration() {
  if (current_.empty()) return;
  last_ = std::move(current_);
  current_.clear();
}

std::vector<LayerOrder::Entry> LayerOrder::Order() const {
  if (!last_.empty()) return last_;
  std::vector<Entry> order;
  for (ShadowableLayer* layer : layers_) {
    if (layer->Communicates()) order.push_back({layer, true});
  }
  return order;
}

}  // namespace dtrain::ddp::internal
