#include "dist/launch/nnodes_flag.h"

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace dtrain::launch {

bool AbslParseFlag(absl::string_view text, NnodesFlag* flag,
                   std::string* error) {
  const std::vector<absl::string_view> parts = absl::StrSplit(text, ':');
  NnodesFlag out;
  const bool parsed = parts.size() <= 2 &&
                      absl::SimpleAtoi(parts.front(), &out.min) &&
                      absl::SimpleAtoi(parts.back(), &out.max);
  if (!parsed || out.min < 1 || out.max < out.min) {
    *error = absl::StrCat("'", text,
                          "' is not a number of nodes (N) or a range "
                          "(MIN:MAX, 1 <= MIN <= MAX)");
    return false;
  }
  *flag = out;
  return true;
}

std::string AbslUnparseFlag(const NnodesFlag& flag) {
  if (flag.min == flag.max) return absl::StrCat(flag.min);
  return absl::StrCat(flag.min, ":", flag.max);
}

}  // namespace dtrain::launch
