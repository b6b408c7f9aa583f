#include "base/duration_flag.h"

#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace dtrain::base {

bool AbslParseFlag(absl::string_view text, DurationFlag* flag,
                   std::string* error) {
  text = absl::StripAsciiWhitespace(text);
  double seconds = 0;
  absl::Duration d;
  if (absl::SimpleAtod(text, &seconds) && std::isfinite(seconds)) {
    d = absl::Seconds(seconds);  // A bare number: seconds, as in Python.
  } else if (!absl::ParseDuration(text, &d)) {
    *error = absl::StrCat("'", text,
                          "' is not a duration: give seconds (30, 2.5) or a "
                          "number with a unit (30s, 5m, 1h30m, 250ms)");
    return false;
  }
  if (d < absl::ZeroDuration()) {
    *error = absl::StrCat("'", text, "' is negative");
    return false;
  }
  flag->value = d;
  return true;
}

std::string AbslUnparseFlag(const DurationFlag& flag) {
  return absl::FormatDuration(flag.value);
}

}  // namespace dtrain::base
