#include "dist/ddp/join.h"

#include <ATen/Functions.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "base/torch_guard.h"
#include "dist/ddp/model_fingerprint.h"

namespace dtrain::ddp {
namespace {

using internal::FormatRanks;

// A rank's slot in a round's notification.
constexpr int kActive = 1;
constexpr int kBackward = 2;
constexpr int kGradSync = 4;

std::string Describe(int code) {
  if ((code & kActive) == 0) return "joined";
  if ((code & kBackward) == 0) return "active, no backward";
  return (code & kGradSync) != 0 ? "active, synchronising gradients"
                                 : "active, no gradient sync";
}

}  // namespace

absl::StatusOr<std::unique_ptr<Join>> Join::Create(
    std::vector<Joinable*> joinables, backend::Backend& backend,
    const JoinOptions& options) {
  const std::string prefix = absl::StrCat("[rank ", backend.rank(), "] join: ");
  if (joinables.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "a Join needs at least one joinable"));
  }
  for (size_t i = 0; i < joinables.size(); ++i) {
    if (joinables[i] == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(prefix, "joinable ", i, " is null"));
    }
    if (std::count(joinables.begin(), joinables.end(), joinables[i]) > 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          prefix, joinables[i]->JoinableName(), " is given more than once"));
    }
  }
  std::unique_ptr<Join> join(new Join(std::move(joinables), backend, options));
  for (Joinable* j : join->joinables_) {
    // On failure the destructor detaches the others.
    DTRAIN_RETURN_IF_ERROR(j->Attach(*join, /*notifies=*/join->attached_ == 0));
    ++join->attached_;
  }
  return join;
}

Join::Join(std::vector<Joinable*> joinables, backend::Backend& backend,
           const JoinOptions& options)
    : joinables_(std::move(joinables)),
      options_(options),
      comm_(backend, options.device, options.timeout,
            absl::StrCat("[rank ", backend.rank(), "] join: "),
            "JoinOptions::timeout") {
  last_round_.world_size = backend.size();
}

Join::~Join() {
  for (size_t i = 0; i < attached_; ++i) joinables_[i]->Detach();
}

absl::Status Join::Broken(absl::Status s) {
  if (broken_.ok()) broken_ = std::move(s);
  return broken_;
}

absl::StatusOr<JoinRound> Join::Round(int code) {
  DTRAIN_RETURN_IF_ERROR(broken_);
  const int64_t index = last_round_.index + 1;
  const int world = comm_.world_size();
  const absl::Time start = absl::Now();
  at::Tensor rows;
  std::shared_ptr<backend::Work> work;
  absl::Status s =
      base::GuardTorch(absl::StatusCode::kInternal, comm_.torch_prefix(), [&] {
        work = comm_.GatherBySum(at::full({1}, code, at::kInt), options_.device,
                                 &rows, "join round");
        return absl::OkStatus();
      });
  if (s.ok()) {
    s = comm_.WaitForResult(*work,
                            absl::StrCat("round ", index, " notification (",
                                         Describe(code), " here)"),
                            start);
  }
  std::vector<int> codes(world, 0);
  if (s.ok()) {
    s = base::GuardTorch(absl::StatusCode::kInternal, comm_.torch_prefix(),
                         [&] {
                           const at::Tensor host = rows.cpu();
                           const auto a = host.accessor<int, 2>();
                           for (int r = 0; r < world; ++r) codes[r] = a[r][0];
                           return absl::OkStatus();
                         });
  }
  if (!s.ok()) return Broken(s);

  JoinRound round;
  round.index = index;
  round.world_size = world;
  active_ranks_.clear();
  int first_code = -1;
  bool agree = true;
  for (int r = 0; r < world; ++r) {
    if ((codes[r] & kActive) == 0) continue;
    active_ranks_.push_back(r);
    round.authoritative_rank = r;
    if (first_code < 0) first_code = codes[r];
    agree = agree && codes[r] == first_code;
  }
  round.active = static_cast<int>(active_ranks_.size());
  round.backward = first_code > 0 && (first_code & kBackward) != 0;
  round.grad_sync = first_code > 0 && (first_code & kGradSync) != 0;
  last_round_ = round;
  if (round.active > 0) {
    ++active_rounds_;
    last_authoritative_ = round.authoritative_rank;
  }
  if (!agree) {
    // Each side would issue different collectives next: fail everywhere now.
    std::string who;
    for (int c :
         {kActive, kActive | kBackward, kActive | kBackward | kGradSync}) {
      std::vector<int> ranks;
      for (int r = 0; r < world; ++r) {
        if (codes[r] == c) ranks.push_back(r);
      }
      if (ranks.empty()) continue;
      absl::StrAppend(&who, who.empty() ? "" : "; ", FormatRanks(ranks), " ",
                      Describe(c));
    }
    return Broken(absl::FailedPreconditionError(absl::StrCat(
        comm_.prefix(), "round ", index,
        ": the active ranks' iterations differ (", who,
        "): every rank must run backward and no_sync alike, so that a "
        "joined rank can shadow them")));
  }
  for (Joinable* j : joinables_) j->OnRound(round);
  return round;
}

absl::StatusOr<JoinRound> Join::NotifyActive(bool backward, bool grad_sync) {
  DTRAIN_RETURN_IF_ERROR(broken_);
  if (joined_) {
    return absl::FailedPreconditionError(
        absl::StrCat(comm_.prefix(),
                     "NotifyActive after JoinAndShadow: a "
                     "rank that has joined stays joined"));
  }
  const int code = kActive | (backward ? kBackward : 0) |
                   (backward && grad_sync ? kGradSync : 0);
  DTRAIN_ASSIGN_OR_RETURN(JoinRound round, Round(code));
  if (options_.throw_on_early_termination && round.active < round.world_size) {
    std::vector<int> joined;
    for (int r = 0; r < round.world_size; ++r) {
      if (std::find(active_ranks_.begin(), active_ranks_.end(), r) ==
          active_ranks_.end()) {
        joined.push_back(r);
      }
    }
    return Broken(absl::OutOfRangeError(absl::StrCat(
        comm_.prefix(), "round ", round.index, ": ", FormatRanks(joined),
        " ran out of inputs (throw_on_early_termination)")));
  }
  return round;
}

absl::StatusOr<JoinSummary> Join::JoinAndShadow() {
  DTRAIN_RETURN_IF_ERROR(broken_);
  if (joined_) {
    return absl::FailedPreconditionError(
        absl::StrCat(comm_.prefix(), "JoinAndShadow runs once"));
  }
  joined_ = true;
  JoinSummary summary;
  bool last_joiner = true;
  for (;;) {
    DTRAIN_ASSIGN_OR_RETURN(const JoinRound round, Round(0));
    if (round.active == 0) break;
    const std::string where = absl::StrCat(
        "round ", round.index, " (", FormatRanks(active_ranks_),
        " active, authoritative rank ", round.authoritative_rank, ")");
    if (options_.throw_on_early_termination) {
      return Broken(absl::OutOfRangeError(
          absl::StrCat(comm_.prefix(), "this rank ran out of inputs before ",
                       where, " (throw_on_early_termination)")));
    }
    last_joiner = false;
    for (Joinable* j : joinables_) {
      absl::Status s = j->Shadow(round);
      if (!s.ok()) {
        return Broken(absl::Status(
            s.code(), absl::StrCat(comm_.prefix(), where, ", shadowing ",
                                   j->JoinableName(), ": ", s.message())));
      }
    }
    ++summary.shadowed;
  }
  summary.rounds = active_rounds_;
  summary.is_last_joiner = last_joiner;
  // PyTorch breaks ties between last joiners towards the higher rank; with
  // no active round at all, every rank is a last joiner.
  summary.final_rank =
      last_authoritative_ >= 0 ? last_authoritative_ : comm_.world_size() - 1;
  for (Joinable* j : joinables_) {
    absl::Status s = j->Finish(summary);
    if (!s.ok()) {
      return Broken(absl::Status(
          s.code(),
          absl::StrCat(comm_.prefix(), "finishing ", j->JoinableName(),
                       " (the final model from rank ", summary.final_rank,
                       "): ", s.message())));
    }
  }
  return summary;
}

}  // namespace dtrain::ddp
