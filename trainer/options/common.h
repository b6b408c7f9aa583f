// What the option sections share: the error every validator returns, naming
// the flag ("--lr: must be a finite number > 0"). Header-only.
#ifndef DTRAIN_TRAINER_OPTIONS_COMMON_H_
#define DTRAIN_TRAINER_OPTIONS_COMMON_H_

#include <algorithm>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace dtrain::trainer::options_internal {

inline absl::Status Invalid(absl::string_view flag, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", why));
}

inline bool Known(const std::vector<std::string>& names,
                  const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace dtrain::trainer::options_internal

#endif  // DTRAIN_TRAINER_OPTIONS_COMMON_H_
