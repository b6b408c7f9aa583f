// Helpers shared by the Store implementations: counter arithmetic on decimal
// text and the wording of timeout errors, so that every store behaves and
// reports alike.
#ifndef DTRAIN_DIST_STORE_STORE_UTIL_H_
#define DTRAIN_DIST_STORE_STORE_UTIL_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace dtrain::store::internal {

// The new counter text after adding `delta` to `current` (absent counts as 0),
// or kInvalidArgument naming `key` when `current` is not a decimal integer or
// the sum overflows.
absl::StatusOr<int64_t> AddToCounter(absl::string_view key,
                                     const std::string* current, int64_t delta);

// "wait for keys [a, b] at <where> timed out after 30s (missing: b)".
absl::Status KeysTimeoutError(absl::string_view op,
                              absl::Span<const std::string> keys,
                              absl::Span<const std::string> missing,
                              absl::string_view where, absl::Duration waited);

}  // namespace dtrain::store::internal

#endif  // DTRAIN_DIST_STORE_STORE_UTIL_H_
