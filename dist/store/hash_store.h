// An in-memory Store for the threads of one process: tests run N ranks as
// threads over one HashStore. Thread-safe; handles are shared through
// std::shared_ptr.
#ifndef DTRAIN_DIST_STORE_HASH_STORE_H_
#define DTRAIN_DIST_STORE_HASH_STORE_H_

#include <condition_variable>
#include <mutex>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "dist/store/store.h"

namespace dtrain::store {

class HashStore : public Store {
 public:
  explicit HashStore(absl::Duration timeout = kDefaultStoreTimeout)
      : Store(timeout) {}

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
  std::string Describe() const override { return "hash store"; }

 private:
  // Standard mutex and condition variable rather than Abseil's, so that
  // ThreadSanitizer builds see the synchronisation (Debian's Abseil is not
  // instrumented).
  std::mutex mu_;
  // Notified whenever a key may have been added (Set, Add, CompareSet).
  std::condition_variable key_added_;
  absl::flat_hash_map<std::string, std::string> data_;  // Guarded by mu_.
};

}  // namespace dtrain::store

#endif  // DTRAIN_DIST_STORE_HASH_STORE_H_
