#include "dist/ddp/model_fingerprint.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/fnv1a.h"

namespace dtrain::ddp::internal {

uint64_t Fingerprint(absl::Span<const std::string> entries) {
  base::Fnv1a h;
  for (const std::string& e : entries) {
    h.Update(e);
    h.Update('\n');
  }
  return h.digest();
}

std::string JoinEntries(absl::Span<const std::string> entries) {
  return absl::StrJoin(entries, "\n");
}

std::vector<std::string> SplitEntries(absl::string_view joined) {
  if (joined.empty()) return {};
  return absl::StrSplit(joined, '\n');
}

std::string FormatRanks(absl::Span<const int> ranks) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (j >= i + 2) {
      parts.push_back(absl::StrCat(ranks[i], "-", ranks[j]));
    } else {
      for (size_t k = i; k <= j; ++k) parts.push_back(absl::StrCat(ranks[k]));
    }
    i = j + 1;
  }
  return absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ",
                      absl::StrJoin(parts, ", "));
}

std::string DescribeFirstMismatch(
    absl::Span<const std::vector<std::string>> per_rank) {
  if (per_rank.empty()) return "";
  size_t longest = 0;
  for (const auto& entries : per_rank)
    longest = std::max(longest, entries.size());
  for (size_t i = 0; i < longest; ++i) {
    // Ranks grouped by what they have at entry i, groups in order of their
    // lowest rank; "" stands for "no such entry".
    std::vector<std::pair<std::string, std::vector<int>>> groups;
    for (size_t r = 0; r < per_rank.size(); ++r) {
      const std::string value = i < per_rank[r].size() ? per_rank[r][i] : "";
      auto it = std::find_if(groups.begin(), groups.end(),
                             [&](const auto& g) { return g.first == value; });
      if (it == groups.end()) {
        groups.push_back({value, {static_cast<int>(r)}});
      } else {
        it->second.push_back(static_cast<int>(r));
      }
    }
    if (groups.size() == 1) continue;
    std::vector<std::string> sides;
    for (const auto& [value, ranks] : groups) {
      const bool one = ranks.size() == 1;
      if (value.empty()) {
        sides.push_back(absl::StrCat(
            FormatRanks(ranks), one ? " has" : " have", " nothing there (",
            per_rank[ranks.front()].size(), " entries in all)"));
      } else {
        sides.push_back(
            absl::StrCat(FormatRanks(ranks), one ? " has " : " have ", value));
      }
    }
    return absl::StrCat("entry ", i + 1, " of ", per_rank[0].size(), ": ",
                        absl::StrJoin(sides, "; "));
  }
  return "";
}

}  // namespace dtrain::ddp::internal
