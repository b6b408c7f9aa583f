// Adapts a dtrain Store to Gloo's rendezvous store interface, so that
// gloo::rendezvous::Context can connect its full mesh through the same store
// the ranks met in (usually a PrefixStore).
//
// Gloo's interface reports failures by exception: store errors become
// gloo::IoException carrying the store's message (which names the keys, the
// store and the time waited). Thread-safe as the store.
#ifndef DTRAIN_DIST_BACKEND_GLOO_GLOO_STORE_H_
#define DTRAIN_DIST_BACKEND_GLOO_GLOO_STORE_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "dist/store/store.h"
#include "gloo/rendezvous/store.h"

namespace dtrain::backend {

class GlooStore : public ::gloo::rendezvous::Store {
 public:
  // Keeps `store` alive. Gloo's get() and wait() without a timeout use the
  // store's default timeout.
  explicit GlooStore(std::shared_ptr<store::Store> store)
      : store_(std::move(store)) {}

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  std::shared_ptr<store::Store> store_;
};

}  // namespace dtrain::backend

#endif  // DTRAIN_DIST_BACKEND_GLOO_GLOO_STORE_H_
