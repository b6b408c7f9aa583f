#include "dist/store/prefix_store.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace dtrain::store {

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> base)
    : Store(base->timeout()),
      prefix_(std::move(prefix)),
      base_(std::move(base)) {}

std::string PrefixStore::Key(absl::string_view key) const {
  return absl::StrCat(prefix_, "/", key);
}

std::vector<std::string> PrefixStore::Keys(
    absl::Span<const std::string> keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const std::string& k : keys) out.push_back(Key(k));
  return out;
}

absl::Status PrefixStore::Set(absl::string_view key, absl::string_view value) {
  return base_->Set(Key(key), value);
}

absl::StatusOr<std::string> PrefixStore::Get(absl::string_view key,
                                             absl::Duration timeout) {
  return base_->Get(Key(key), timeout);
}

absl::StatusOr<int64_t> PrefixStore::Add(absl::string_view key, int64_t delta) {
  return base_->Add(Key(key), delta);
}

absl::StatusOr<std::string> PrefixStore::CompareSet(absl::string_view key,
                                                    absl::string_view expected,
                                                    absl::string_view desired) {
  return base_->CompareSet(Key(key), expected, desired);
}

absl::StatusOr<bool> PrefixStore::Check(absl::Span<const std::string> keys) {
  return base_->Check(Keys(keys));
}

absl::Status PrefixStore::Wait(absl::Span<const std::string> keys,
                               absl::Duration timeout) {
  return base_->Wait(Keys(keys), timeout);
}

absl::StatusOr<bool> PrefixStore::Delete(absl::string_view key) {
  return base_->Delete(Key(key));
}

absl::StatusOr<int64_t> PrefixStore::NumKeys() { return base_->NumKeys(); }

std::string PrefixStore::Describe() const { return base_->Describe(); }

}  // namespace dtrain::store
