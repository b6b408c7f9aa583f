#include "base/name_list.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dtrain::base {

std::string JoinFirst(const std::vector<std::string>& names, size_t shown) {
  const size_t n = std::min(names.size(), shown);
  std::string out = absl::StrJoin(names.begin(), names.begin() + n, ", ");
  if (names.size() > n)
    absl::StrAppend(&out, " and ", names.size() - n, " more");
  return out;
}

}  // namespace dtrain::base
