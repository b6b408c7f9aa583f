#include "dist/store/hash_store.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "absl/time/clock.h"
#include "dist/store/store_util.h"

namespace dtrain::store {

absl::Status HashStore::Set(absl::string_view key, absl::string_view value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    data_[key] = std::string(value);
  }
  key_added_.notify_all();
  return absl::OkStatus();
}

absl::StatusOr<std::string> HashStore::Get(absl::string_view key,
                                           absl::Duration timeout) {
  const std::string k(key);
  const absl::Status s = Wait(absl::MakeConstSpan(&k, 1), timeout);
  if (!s.ok()) {
    return internal::KeysTimeoutError("get", {k}, {k}, Describe(), timeout);
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = data_.find(key);
  // Deleted between the wait and this lookup: report like a timeout, which is
  // what the caller saw.
  if (it == data_.end()) {
    return internal::KeysTimeoutError("get", {k}, {k}, Describe(), timeout);
  }
  return it->second;
}

absl::StatusOr<int64_t> HashStore::Add(absl::string_view key, int64_t delta) {
  absl::StatusOr<int64_t> sum;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = data_.find(key);
    sum = internal::AddToCounter(key, it == data_.end() ? nullptr : &it->second,
                                 delta);
    if (sum.ok()) data_[key] = std::to_string(*sum);
  }
  if (sum.ok()) key_added_.notify_all();
  return sum;
}

absl::StatusOr<std::string> HashStore::CompareSet(absl::string_view key,
                                                  absl::string_view expected,
                                                  absl::string_view desired) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = data_.find(key);
    if (it != data_.end()) {
      if (it->second == expected) it->second = std::string(desired);
      return it->second;
    }
    if (!expected.empty()) return std::string();
    data_[key] = std::string(desired);
  }
  key_added_.notify_all();
  return std::string(desired);
}

absl::StatusOr<bool> HashStore::Check(absl::Span<const std::string> keys) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& k : keys) {
    if (!data_.contains(k)) return false;
  }
  return true;
}

absl::Status HashStore::Wait(absl::Span<const std::string> keys,
                             absl::Duration timeout) {
  // Called with mu_ held.
  auto all_present = [&]() {
    for (const std::string& k : keys) {
      if (!data_.contains(k)) return false;
    }
    return true;
  };
  std::unique_lock<std::mutex> lock(mu_);
  // The predicate overloads re-check after every wakeup, spurious ones
  // included. Centuries (absl::InfiniteDuration() among them) overflow
  // std::chrono's nanoseconds: treat them as forever.
  if (timeout >= absl::Hours(24 * 365 * 100)) {
    key_added_.wait(lock, all_present);
    return absl::OkStatus();
  }
  const auto deadline =
      std::chrono::steady_clock::now() +
      absl::ToChronoNanoseconds(std::max(timeout, absl::ZeroDuration()));
  if (key_added_.wait_until(lock, deadline, all_present)) {
    return absl::OkStatus();
  }
  std::vector<std::string> missing;
  for (const std::string& k : keys) {
    if (!data_.contains(k)) missing.push_back(k);
  }
  return internal::KeysTimeoutError("wait", keys, missing, Describe(), timeout);
}

absl::StatusOr<bool> HashStore::Delete(absl::string_view key) {
  std::lock_guard<std::mutex> lock(mu_);
  return data_.erase(key) > 0;
}

absl::StatusOr<int64_t> HashStore::NumKeys() {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(data_.size());
}

}  // namespace dtrain::store
