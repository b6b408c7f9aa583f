// A duration flag that takes what torch.distributed users write, a bare
// number of seconds ("30", "2.5"), as well as Abseil's forms ("30s", "5m",
// "1h30m", "250ms", "inf"):
//
//   ABSL_FLAG(dtrain::base::DurationFlag, timeout,
//             dtrain::base::DurationFlag(absl::Minutes(5)), "...");
//   absl::Duration t = absl::GetFlag(FLAGS_timeout).value;
//
// Parsing refuses negative durations, naming what it was given.
#ifndef DTRAIN_BASE_DURATION_FLAG_H_
#define DTRAIN_BASE_DURATION_FLAG_H_

#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace dtrain::base {

struct DurationFlag {
  DurationFlag() = default;
  DurationFlag(absl::Duration d) : value(d) {}  // NOLINT: implicit on purpose.
  absl::Duration value = absl::ZeroDuration();
};

// Abseil's flag hooks (found by argument-dependent lookup).
bool AbslParseFlag(absl::string_view text, DurationFlag* flag,
                   std::string* error);
std::string AbslUnparseFlag(const DurationFlag& flag);

}  // namespace dtrain::base

#endif  // DTRAIN_BASE_DURATION_FLAG_H_
