#include "dist/rendezvous/slurm_nodelist.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"

namespace dtrain::rendezvous {
namespace {

// 18 digits always fit in uint64_t; longer numbers are typos, not host
// indices.
constexpr size_t kMaxDigits = 18;

// One entry of a bracket group: "07" is {7, 7, 2}, "01-03" is {1, 3, 2}.
struct Range {
  uint64_t lo;
  uint64_t hi;
  size_t width;  // of `lo` as written: the zero padding of every number
};

// A host pattern is literal text and bracket groups in the order written;
// exactly one of the two members is used.
struct Piece {
  std::string literal;
  std::vector<Range> group;
};

absl::Status NodeListError(absl::string_view list, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("Slurm node list '", list, "': ", why));
}

bool IsDigits(absl::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

absl::StatusOr<Range> ParseRange(absl::string_view list,
                                 absl::string_view entry) {
  absl::string_view lo_text = entry;
  absl::string_view hi_text = entry;
  const size_t dash = entry.find('-');
  if (dash != absl::string_view::npos) {
    lo_text = entry.substr(0, dash);
    hi_text = entry.substr(dash + 1);
  }
  if (!IsDigits(lo_text) || !IsDigits(hi_text)) {
    return NodeListError(
        list, absl::StrCat("'", entry,
                           "' in brackets is neither a number nor a range "
                           "such as 01-04"));
  }
  if (lo_text.size() > kMaxDigits || hi_text.size() > kMaxDigits) {
    return NodeListError(list, absl::StrCat("'", entry, "' has more than ",
                                            kMaxDigits, " digits"));
  }
  Range range{0, 0, lo_text.size()};
  if (!absl::SimpleAtoi(lo_text, &range.lo) ||
      !absl::SimpleAtoi(hi_text, &range.hi)) {
    return NodeListError(list, absl::StrCat("cannot read '", entry, "'"));
  }
  if (range.lo > range.hi) {
    return NodeListError(
        list, absl::StrCat("range '", entry, "' is reversed (start > end)"));
  }
  return range;
}

// Splits at commas outside brackets, checking the brackets on the way so that
// later steps can rely on every '[' having its ']'.
absl::StatusOr<std::vector<absl::string_view>> SplitHosts(
    absl::string_view list) {
  std::vector<absl::string_view> hosts;
  size_t start = 0;
  size_t open = absl::string_view::npos;  // offset of the unclosed '['
  for (size_t i = 0; i < list.size(); ++i) {
    const char c = list[i];
    const unsigned char uc = static_cast<unsigned char>(c);
    if (absl::ascii_isspace(uc) || absl::ascii_iscntrl(uc)) {
      return NodeListError(
          list, absl::StrCat("whitespace or control character at offset ", i));
    }
    if (c == '[') {
      if (open != absl::string_view::npos) {
        return NodeListError(list, absl::StrCat("nested '[' at offset ", i));
      }
      open = i;
    } else if (c == ']') {
      if (open == absl::string_view::npos) {
        return NodeListError(
            list, absl::StrCat("']' at offset ", i, " has no matching '['"));
      }
      open = absl::string_view::npos;
    } else if (c == ',' && open == absl::string_view::npos) {
      hosts.push_back(list.substr(start, i - start));
      start = i + 1;
    }
  }
  if (open != absl::string_view::npos) {
    return NodeListError(
        list, absl::StrCat("'[' at offset ", open, " is not closed"));
  }
  hosts.push_back(list.substr(start));
  for (absl::string_view host : hosts) {
    if (host.empty()) {
      return NodeListError(list, "empty host name (stray comma)");
    }
  }
  return hosts;
}

// Parses one host pattern and adds the number of names it expands to into
// `*total`, failing as soon as the running total passes `max_hosts`.
absl::StatusOr<std::vector<Piece>> ParseHost(absl::string_view list,
                                             absl::string_view host,
                                             size_t max_hosts,
                                             uint64_t* total) {
  const auto too_many = [&] {
    return NodeListError(
        list, absl::StrCat("expands to more than ", max_hosts, " hosts"));
  };
  std::vector<Piece> pieces;
  uint64_t count = 1;
  size_t i = 0;
  while (i < host.size()) {
    if (host[i] != '[') {
      const size_t next = std::min(host.find('[', i), host.size());
      pieces.push_back(Piece{std::string(host.substr(i, next - i)), {}});
      i = next;
      continue;
    }
    const size_t close = host.find(']', i);  // SplitHosts checked it exists
    const absl::string_view content = host.substr(i + 1, close - i - 1);
    if (content.empty()) {
      return NodeListError(list,
                           absl::StrCat("empty brackets in '", host, "'"));
    }
    Piece piece;
    uint64_t group_size = 0;
    for (absl::string_view entry : absl::StrSplit(content, ',')) {
      if (entry.empty()) {
        return NodeListError(list,
                             absl::StrCat("empty entry in '[", content, "]'"));
      }
      DTRAIN_ASSIGN_OR_RETURN(const Range range, ParseRange(list, entry));
      // Each term is below 10^18 and the sum so far at most max_hosts: no
      // overflow.
      group_size += range.hi - range.lo + 1;
      if (group_size > max_hosts) return too_many();
      piece.group.push_back(range);
    }
    count *= group_size;  // both factors <= max_hosts: fits in 64 bits
    if (count > max_hosts) return too_many();
    pieces.push_back(std::move(piece));
    i = close + 1;
  }
  *total += count;
  if (*total > max_hosts) return too_many();
  return pieces;
}

std::string FormatNumber(uint64_t value, size_t width) {
  std::string digits = std::to_string(value);
  if (digits.size() < width) digits.insert(0, width - digits.size(), '0');
  return digits;
}

// The cartesian product of the pieces, leftmost group varying slowest.
void ExpandHost(const std::vector<Piece>& pieces,
                std::vector<std::string>* out) {
  std::vector<std::string> names = {""};
  std::vector<std::string> next;
  for (const Piece& piece : pieces) {
    if (piece.group.empty()) {
      for (std::string& name : names) name += piece.literal;
      continue;
    }
    next.clear();
    for (const std::string& name : names) {
      for (const Range& range : piece.group) {
        for (uint64_t v = range.lo;; ++v) {
          next.push_back(name + FormatNumber(v, range.width));
          if (v == range.hi) break;
        }
      }
    }
    names.swap(next);
  }
  for (std::string& name : names) out->push_back(std::move(name));
}

absl::Status TasksError(absl::string_view spec, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("Slurm tasks per node '", spec, "': ", why));
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ExpandSlurmNodeList(
    absl::string_view list, size_t max_hosts) {
  if (list.empty()) return NodeListError(list, "the list is empty");
  DTRAIN_ASSIGN_OR_RETURN(const std::vector<absl::string_view> hosts,
                          SplitHosts(list));

  // Parse everything first so that the size limit is checked before any
  // name is built.
  std::vector<std::vector<Piece>> parsed;
  uint64_t total = 0;
  for (absl::string_view host : hosts) {
    DTRAIN_ASSIGN_OR_RETURN(std::vector<Piece> pieces,
                            ParseHost(list, host, max_hosts, &total));
    parsed.push_back(std::move(pieces));
  }
  std::vector<std::string> names;
  names.reserve(total);
  for (const std::vector<Piece>& pieces : parsed) ExpandHost(pieces, &names);
  return names;
}

absl::StatusOr<std::vector<int>> ExpandSlurmTasksPerNode(
    absl::string_view spec) {
  if (spec.empty()) return TasksError(spec, "the list is empty");
  std::vector<int> counts;
  for (absl::string_view item : absl::StrSplit(spec, ',')) {
    absl::string_view count_text = item;
    absl::string_view repeat_text = "1";
    const size_t paren = item.find('(');
    if (paren != absl::string_view::npos) {
      count_text = item.substr(0, paren);
      repeat_text = item.substr(paren + 1);
      if (!absl::ConsumePrefix(&repeat_text, "x") ||
          !absl::ConsumeSuffix(&repeat_text, ")")) {
        return TasksError(
            spec, absl::StrCat("'", item, "' is not of the form N(xM)"));
      }
    }
    int count = 0;
    int repeat = 0;
    if (!IsDigits(count_text) || !absl::SimpleAtoi(count_text, &count)) {
      return TasksError(
          spec, absl::StrCat("'", item, "' does not start with a count"));
    }
    if (!IsDigits(repeat_text) || !absl::SimpleAtoi(repeat_text, &repeat) ||
        repeat < 1) {
      return TasksError(spec, absl::StrCat("repeat in '", item,
                                           "' is not a positive integer"));
    }
    if (static_cast<size_t>(repeat) > kMaxSlurmHosts - counts.size()) {
      return TasksError(spec, absl::StrCat("expands to more than ",
                                           kMaxSlurmHosts, " nodes"));
    }
    counts.insert(counts.end(), repeat, count);
  }
  return counts;
}

}  // namespace dtrain::rendezvous
