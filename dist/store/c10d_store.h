// A Store backed by LibTorch's c10d TCPStore client: how ranks use the store
// that torchrun's agent serves on MASTER_ADDR:MASTER_PORT when it starts
// workers with TORCHELASTIC_USE_AGENT_STORE=True (its default mode). The
// client is the LibTorch beside the torchrun installed, so the two speak the
// same protocol version; it never asks for libuv (Debian builds PyTorch
// without it). InitWorld (dist/rendezvous/init.h) uses it for env:// under
// such an agent, in a namespace of its own per restart.
//
// Contract: store.h's, with two notes. Wait, and Get with a timeout, poll
// with c10d's check (every 1 ms at first, backing off to 50 ms): c10d's
// client runs one request at a time, so its own blocking wait would hold
// back every other thread's calls. CompareSet on an absent key with a non-empty
// `expected` returns empty, as store.h says (c10d's server answers
// `expected` there; this client checks the key to tell the cases apart).
// Errors from c10d become kDeadlineExceeded (its timeouts) or kUnavailable,
// naming the operation, the key and the address.
//
// Thread safety: every method may be called from any thread.
#ifndef DTRAIN_DIST_STORE_C10D_STORE_H_
#define DTRAIN_DIST_STORE_C10D_STORE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dist/store/store.h"

namespace c10d {
class TCPStore;
}  // namespace c10d

namespace dtrain::store {

struct C10dStoreOptions {
  std::string host = "127.0.0.1";
  int port = 29500;
  // Connecting (c10d retries until then) and each blocking call.
  absl::Duration timeout = kDefaultStoreTimeout;
};

class C10dStore : public Store {
 public:
  // Connects to a c10d TCPStore server; kUnavailable naming the address when
  // none answers within the timeout.
  static absl::StatusOr<std::shared_ptr<C10dStore>> Connect(
      const C10dStoreOptions& options);
  ~C10dStore() override;

  using Store::Get;
  using Store::Wait;

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key,
                                  absl::Duration timeout) override;
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;
  absl::StatusOr<std::string> CompareSet(absl::string_view key,
                                         absl::string_view expected,
                                         absl::string_view desired) override;
  absl::StatusOr<bool> Check(absl::Span<const std::string> keys) override;
  absl::Status Wait(absl::Span<const std::string> keys,
                    absl::Duration timeout) override;
  absl::StatusOr<bool> Delete(absl::string_view key) override;
  absl::StatusOr<int64_t> NumKeys() override;
  // "c10d tcp://127.0.0.1:29500".
  std::string Describe() const override;

 private:
  C10dStore(const C10dStoreOptions& options,
            std::unique_ptr<c10d::TCPStore> client);

  const C10dStoreOptions options_;
  const std::unique_ptr<c10d::TCPStore> client_;
};

}  // namespace dtrain::store

#endif  // DTRAIN_DIST_STORE_C10D_STORE_H_
