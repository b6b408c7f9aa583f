// The key-value store through which ranks find each other and exchange
// connection data (Gloo's full-mesh addresses, NCCL's unique id). Keys are
// strings; values are arbitrary bytes.
//
// Implementations: TcpStore (server in rank 0's process), FileStore (file on a
// shared filesystem), HashStore (in memory, for tests and threads of one
// process), PrefixStore (a namespace over another).
//
// Contract shared by every implementation:
// - Thread safety: every method may be called concurrently from any number
//   of threads.
// - Blocking: Get and Wait block until the keys exist or the timeout
//   passes; every other call returns as soon as the store has answered. A
//   timeout gives kDeadlineExceeded, naming the keys, the store and the
//   time waited. A store that cannot be reached any more gives
//   kUnavailable.
// - Add keeps counters as decimal text: Get on a counter returns e.g. "3";
//   Add on a key whose value is not an integer gives kInvalidArgument.
// - CompareSet(key, expected, desired): if the key is absent and
//   `expected` is empty, or the key holds exactly `expected`, the key
//   becomes `desired`. Returns the value the key holds afterwards (the
//   current value when the swap did not happen; empty when the key is
//   absent). Same as PyTorch's c10d Store::compareSet.
// - NumKeys counts every key in the underlying store, including other
//   namespaces' keys.
//
// Example: rank 0 publishes a value, every rank reads it and counts itself
// in (inside a function that returns absl::Status; see
// base/status_macros.h):
//
//   Store& store = *world.store;  // from rendezvous::InitWorld
//   if (rank == 0) DTRAIN_RETURN_IF_ERROR(store.Set("job/id", id));
//   DTRAIN_ASSIGN_OR_RETURN(std::string job_id, store.Get("job/id"));
//   DTRAIN_ASSIGN_OR_RETURN(int64_t arrived, store.Add("job/arrived", 1));
#ifndef DTRAIN_DIST_STORE_STORE_H_
#define DTRAIN_DIST_STORE_STORE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace dtrain::store {

// Used by the overloads without a timeout unless a store is given another one.
inline constexpr absl::Duration kDefaultStoreTimeout = absl::Seconds(300);

class Store {
 public:
  explicit Store(absl::Duration timeout = kDefaultStoreTimeout)
      : timeout_(timeout) {}
  virtual ~Store() = default;

  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  virtual absl::Status Set(absl::string_view key, absl::string_view value) = 0;

  // Blocks until `key` exists, then returns its value.
  virtual absl::StatusOr<std::string> Get(absl::string_view key,
                                          absl::Duration timeout) = 0;

  // Adds `delta` to the counter `key` (created at 0) and returns the new value.
  virtual absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) = 0;

  virtual absl::StatusOr<std::string> CompareSet(absl::string_view key,
                                                 absl::string_view expected,
                                                 absl::string_view desired) = 0;

  // True when every key exists; never blocks.
  virtual absl::StatusOr<bool> Check(absl::Span<const std::string> keys) = 0;

  // Blocks until every key exists.
  virtual absl::Status Wait(absl::Span<const std::string> keys,
                            absl::Duration timeout) = 0;

  // True when the key existed.
  virtual absl::StatusOr<bool> Delete(absl::string_view key) = 0;

  virtual absl::StatusOr<int64_t> NumKeys() = 0;

  // Where the store lives, for error messages: "tcp://10.0.0.1:29500",
  // "file:///shared/store".
  virtual std::string Describe() const = 0;

  absl::StatusOr<std::string> Get(absl::string_view key) {
    return Get(key, timeout_);
  }
  absl::Status Wait(absl::Span<const std::string> keys) {
    return Wait(keys, timeout_);
  }

  absl::Duration timeout() const { return timeout_; }

 private:
  const absl::Duration timeout_;
};

}  // namespace dtrain::store

#endif  // DTRAIN_DIST_STORE_STORE_H_
