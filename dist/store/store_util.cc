#include "dist/store/store_util.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dtrain::store::internal {

absl::StatusOr<int64_t> AddToCounter(absl::string_view key,
                                     const std::string* current,
                                     int64_t delta) {
  int64_t value = 0;
  if (current != nullptr && !absl::SimpleAtoi(*current, &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("add to key '", key, "': its value (", current->size(),
                     " bytes) is not a decimal integer"));
  }
  int64_t sum = 0;
  if (__builtin_add_overflow(value, delta, &sum)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "add to key '", key, "': ", value, " + ", delta, " overflows int64"));
  }
  return sum;
}

absl::Status KeysTimeoutError(absl::string_view op,
                              absl::Span<const std::string> keys,
                              absl::Span<const std::string> missing,
                              absl::string_view where, absl::Duration waited) {
  return absl::DeadlineExceededError(absl::StrCat(
      op, " of key", keys.size() == 1 ? " '" : "s ['",
      absl::StrJoin(keys, "', '"), keys.size() == 1 ? "'" : "']", " at ", where,
      " timed out after ", absl::FormatDuration(waited),
      " (missing: ", absl::StrJoin(missing, ", "), ")"));
}

}  // namespace dtrain::store::internal
