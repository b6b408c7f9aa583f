#include "trainer/checkpoint/hook_state.h"

#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "trainer/checkpoint/training_state.h"

namespace dtrain::trainer {
namespace {

constexpr absl::string_view kRankPrefix = "rank";

std::string Quote(absl::string_view text) {
  return absl::StrCat("\"", absl::CHexEscape(text), "\"");
}

// An entry's own name (without its rank): not empty, no '/', and short
// enough once qualified (`qualified` holds the stored name's size).
absl::Status CheckEntryName(absl::string_view name, size_t qualified,
                            absl::string_view which) {
  if (name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(which, " has no name"));
  }
  if (absl::StrContains(name, '/')) {
    return absl::InvalidArgumentError(
        absl::StrCat(which, " ", Quote(name),
                     " has a '/', which checkpoints keep for per-rank names"));
  }
  if (qualified > kMaxCheckpointNameSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("the name of ", which, " has ", qualified,
                     " bytes, more than ", kMaxCheckpointNameSize));
  }
  return absl::OkStatus();
}

}  // namespace

std::string RankEntryName(int rank, absl::string_view name) {
  return absl::StrCat(kRankPrefix, rank, "/", name);
}

bool ParseRankEntryName(absl::string_view entry, int* rank,
                        absl::string_view* name) {
  if (!absl::ConsumePrefix(&entry, kRankPrefix)) return false;
  const size_t slash = entry.find('/');
  if (slash == absl::string_view::npos) return false;
  const absl::string_view digits = entry.substr(0, slash);
  const absl::string_view rest = entry.substr(slash + 1);
  if (digits.empty() || digits.size() > 10 ||
      (digits.size() > 1 && digits[0] == '0') || rest.empty() ||
      absl::StrContains(rest, '/')) {
    return false;
  }
  for (char c : digits) {
    if (!absl::ascii_isdigit(c)) return false;
  }
  int r = 0;
  if (!absl::SimpleAtoi(digits, &r) || r < 0) return false;
  *rank = r;
  *name = rest;
  return true;
}

absl::Status CheckHookState(const HookState& hook) {
  if (hook.name.size() > kMaxCheckpointNameSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("the communication hook's name has ", hook.name.size(),
                     " bytes, more than ", kMaxCheckpointNameSize));
  }
  size_t rank_entries = 0;
  for (const auto& entries : hook.ranks) rank_entries += entries.size();
  if (hook.name.empty() && hook.tensors.size() + rank_entries > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "communication hook state of ", hook.tensors.size() + rank_entries,
        " entries without the hook's name"));
  }
  absl::flat_hash_set<absl::string_view> names;
  for (size_t i = 0; i < hook.tensors.size(); ++i) {
    const auto& [name, tensor] = hook.tensors[i];
    const std::string which =
        absl::StrCat("entry ", i, " of the communication hook's state");
    if (absl::Status s = CheckEntryName(name, name.size(), which); !s.ok()) {
      return s;
    }
    if (!names.insert(name).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the communication hook's state has ", Quote(name), " twice"));
    }
    if (!tensor.defined()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the communication hook's state ", Quote(name),
                       " is an undefined tensor"));
    }
  }
  // Every rank's names as rank 0's, so that a reader can hand each rank of
  // a run of the same size its own part.
  absl::flat_hash_set<absl::string_view> rank_names;
  for (size_t r = 0; r < hook.ranks.size(); ++r) {
    const auto& entries = hook.ranks[r];
    const auto& first = hook.ranks[0];
    if (entries.size() != first.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", r, "'s per-rank communication hook state has ",
                       entries.size(), " entries, rank 0's ", first.size()));
    }
    for (size_t i = 0; i < entries.size(); ++i) {
      const auto& [name, tensor] = entries[i];
      const std::string which = absl::StrCat("entry ", i, " of rank ", r,
                                             "'s communication hook state");
      if (absl::Status s = CheckEntryName(
              name, RankEntryName(static_cast<int>(r), name).size(), which);
          !s.ok()) {
        return s;
      }
      if (name != first[i].first) {
        return absl::InvalidArgumentError(
            absl::StrCat(which, " is ", Quote(name), ", rank 0's is ",
                         Quote(first[i].first)));
      }
      if (r == 0 && !rank_names.insert(name).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("the per-rank communication hook state has ",
                         Quote(name), " twice"));
      }
      if (!tensor.defined()) {
        return absl::InvalidArgumentError(
            absl::StrCat("rank ", r, "'s communication hook state ",
                         Quote(name), " is an undefined tensor"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace dtrain::trainer
