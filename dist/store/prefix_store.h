// A Store that prefixes every key with "<prefix>/" before handing it to another
// store, so that several groups (or several uses of one group) share a store
// without clashing. Thread-safe as the store it wraps; keeps that store alive.
#ifndef DTRAIN_DIST_STORE_PREFIX_STORE_H_
#define DTRAIN_DIST_STORE_PREFIX_STORE_H_

#include <memory>
#include <string>

#include "dist/store/store.h"

namespace dtrain::store {

class PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> base);

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
  // Counts every key of the underlying store (see store.h).
  absl::StatusOr<int64_t> NumKeys() override;
  std::string Describe() const override;

  Store& base() { return *base_; }

 private:
  std::string Key(absl::string_view key) const;
  std::vector<std::string> Keys(absl::Span<const std::string> keys) const;

  const std::string prefix_;
  const std::shared_ptr<Store> base_;
};

}  // namespace dtrain::store

#endif  // DTRAIN_DIST_STORE_PREFIX_STORE_H_
