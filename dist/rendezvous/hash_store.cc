#include "dist/rendezvous/hash_store.h"

#include <vector>

#include "absl/time/clock.h"
#include "dist/rendezvous/store_util.h"

namespace dtrain::rendezvous {

absl::Status HashStore::Set(absl::string_view key, absl::string_view value) {
  absl::MutexLock lock(&mu_);
  data_[key] = std::string(value);
  return absl::OkStatus();
}

absl::StatusOr<std::string> HashStore::Get(absl::string_view key,
                                           absl::Duration timeout) {
  const std::string k(key);
  const absl::Status s = Wait(absl::MakeConstSpan(&k, 1), timeout);
  if (!s.ok()) {
    return internal::KeysTimeoutError("get", {k}, {k}, Describe(), timeout);
  }
  absl::MutexLock lock(&mu_);
  auto it = data_.find(key);
  // Deleted between the wait and this lookup: report like a timeout, which is
  // what the caller saw.
  if (it == data_.end()) {
    return internal::KeysTimeoutError("get", {k}, {k}, Describe(), timeout);
  }
  return it->second;
}

absl::StatusOr<int64_t> HashStore::Add(absl::string_view key, int64_t delta) {
  absl::MutexLock lock(&mu_);
  auto it = data_.find(key);
  absl::StatusOr<int64_t> sum = internal::AddToCounter(
      key, it == data_.end() ? nullptr : &it->second, delta);
  if (sum.ok()) data_[key] = std::to_string(*sum);
  return sum;
}

absl::StatusOr<std::string> HashStore::CompareSet(absl::string_view key,
                                                  absl::string_view expected,
                                                  absl::string_view desired) {
  absl::MutexLock lock(&mu_);
  auto it = data_.find(key);
  if (it == data_.end()) {
    if (!expected.empty()) return std::string();
    data_[key] = std::string(desired);
    return std::string(desired);
  }
  if (it->second == expected) it->second = std::string(desired);
  return it->second;
}

absl::StatusOr<bool> HashStore::Check(absl::Span<const std::string> keys) {
  absl::MutexLock lock(&mu_);
  for (const std::string& k : keys) {
    if (!data_.contains(k)) return false;
  }
  return true;
}

absl::Status HashStore::Wait(absl::Span<const std::string> keys,
                             absl::Duration timeout) {
  auto all_present = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const std::string& k : keys) {
      if (!data_.contains(k)) return false;
    }
    return true;
  };
  absl::MutexLock lock(&mu_);
  if (mu_.AwaitWithTimeout(absl::Condition(&all_present), timeout)) {
    return absl::OkStatus();
  }
  std::vector<std::string> missing;
  for (const std::string& k : keys) {
    if (!data_.contains(k)) missing.push_back(k);
  }
  return internal::KeysTimeoutError("wait", keys, missing, Describe(), timeout);
}

absl::StatusOr<bool> HashStore::Delete(absl::string_view key) {
  absl::MutexLock lock(&mu_);
  return data_.erase(key) > 0;
}

absl::StatusOr<int64_t> HashStore::NumKeys() {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(data_.size());
}

}  // namespace dtrain::rendezvous
