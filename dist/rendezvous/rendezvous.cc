#include "dist/rendezvous/rendezvous.h"

#include <unistd.h>

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace dtrain::rendezvous {
namespace {

// Waiting happens in slices so that an error reported by another rank is seen
// promptly.
constexpr absl::Duration kSlice = absl::Milliseconds(100);
constexpr char kErrorKey[] = "rdzv/error";
// Ranks that have read the error. Rank 0, which serves the store for tcp://
// and env://, waits for them (at most kLinger) before failing, lest the
// store go with its process before they read why.
constexpr char kErrorSeenKey[] = "rdzv/error_seen";
constexpr absl::Duration kLinger = absl::Seconds(3);
// Counters of the ranks that claimed their rank, and of those that also
// agreed on the world size; the last of the latter sets kCompleteKey. Waiting
// on one key costs the same whatever the world size (waiting on every rank's
// key sent a million keys per slice for WORLD_SIZE=1000000, issue #29).
constexpr char kClaimedKey[] = "rdzv/claimed";
constexpr char kJoinedKey[] = "rdzv/joined";
constexpr char kCompleteKey[] = "rdzv/complete";
// After a timeout: missing ranks named, store calls per chunk of claims
// when they are all there, and how long finding them may take at most.
constexpr size_t kMissingShown = 16;
constexpr int kClaimChunk = 1024;
constexpr absl::Duration kMissingSearch = absl::Seconds(1);

std::string RankKey(int rank) { return absl::StrCat("rdzv/rank/", rank); }

std::string Hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "unknown-host";
  return buf;
}

// A store error seen during the rendezvous, saying which rank saw it.
absl::Status Prefixed(const std::string& who, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(who, ": ", s.message()));
}

std::string FormatSeconds(absl::Duration d) {
  return absl::FormatDuration(absl::Trunc(d, absl::Milliseconds(100)));
}

// Whether every rank of the world size fixed in `store` has joined it.
bool RendezvousComplete(store::Store& store) {
  absl::StatusOr<bool> complete = store.Check({kCompleteKey});
  return complete.ok() && *complete;
}

// Appends the ranks in [lo, hi) whose claim is missing, in order, until
// `missing` holds `shown`: one Check for a range whose claims are all there,
// halves otherwise, so the store calls grow with the ranks named, not with
// the world size. False when it stopped at `until` or on a store error.
bool FindMissing(store::Store& store, int lo, int hi, size_t shown,
                 absl::Time until, std::vector<int>* missing) {
  if (missing->size() >= shown) return true;
  if (absl::Now() >= until) return false;
  std::vector<std::string> keys;
  for (int r = lo; r < hi; ++r) keys.push_back(RankKey(r));
  absl::StatusOr<bool> all = store.Check(keys);
  if (!all.ok()) return false;
  if (*all) return true;
  if (hi - lo == 1) {
    missing->push_back(lo);
    return true;
  }
  const int mid = lo + (hi - lo) / 2;
  return FindMissing(store, lo, mid, shown, until, missing) &&
         FindMissing(store, mid, hi, shown, until, missing);
}

// "3/4 ranks joined; missing: rank 2", naming at most kMissingShown ranks
// and taking at most kMissingSearch.
std::string DescribeMissing(store::Store& store, int world_size) {
  absl::StatusOr<int64_t> joined = store.Add(kJoinedKey, 0);
  std::vector<int> found;
  const absl::Time until = absl::Now() + kMissingSearch;
  bool searched = true;
  for (int lo = 0; lo < world_size && found.size() < kMissingShown;
       lo += kClaimChunk) {
    const int hi = std::min(world_size, lo + kClaimChunk);
    if (!FindMissing(store, lo, hi, kMissingShown, until, &found)) {
      searched = false;
      break;
    }
  }
  std::vector<std::string> names;
  for (int r : found) names.push_back(absl::StrCat("rank ", r));
  const int64_t missing =
      joined.ok() ? std::max<int64_t>(world_size - *joined, names.size())
                  : static_cast<int64_t>(names.size());
  std::string out =
      absl::StrCat(world_size - missing, "/", world_size,
                   " ranks joined; missing: ", absl::StrJoin(names, ", "));
  if (missing > static_cast<int64_t>(names.size())) {
    absl::StrAppend(&out, names.empty() ? "" : " and ",
                    missing - static_cast<int64_t>(names.size()),
                    names.empty() ? " ranks" : " more");
  }
  if (!searched && names.size() < kMissingShown) {
    absl::StrAppend(&out, " (not all ranks checked)");
  }
  return out;
}

}  // namespace

std::string PeerInfo::Encode() const {
  return absl::StrCat(rank, " ", world_size, " ", local_rank, " ", pid, " ",
                      host);
}

absl::StatusOr<PeerInfo> PeerInfo::Decode(absl::string_view text) {
  std::vector<absl::string_view> parts =
      absl::StrSplit(text, absl::MaxSplits(' ', 4));
  PeerInfo p;
  if (parts.size() != 5 || !absl::SimpleAtoi(parts[0], &p.rank) ||
      !absl::SimpleAtoi(parts[1], &p.world_size) ||
      !absl::SimpleAtoi(parts[2], &p.local_rank) ||
      !absl::SimpleAtoi(parts[3], &p.pid)) {
    return absl::DataLossError(
        absl::StrCat("malformed rendezvous record '", text, "'"));
  }
  p.host = std::string(parts[4]);
  return p;
}

std::string PeerInfo::Describe() const {
  return absl::StrCat("rank ", rank, " (", host, ", pid ", pid, ")");
}

absl::StatusOr<std::vector<PeerInfo>> Rendezvous(
    store::Store& store, const RendezvousOptions& options) {
  const std::string who = absl::StrCat("[rank ", options.rank,
                                       "] rendezvous at ", store.Describe());
  if (options.world_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        who, ": world size ", options.world_size, " must be at least 1"));
  }
  if (options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": rank ", options.rank,
                                                   " is outside [0, ",
                                                   options.world_size, ")"));
  }
  PeerInfo self;
  self.rank = options.rank;
  self.world_size = options.world_size;
  self.local_rank = options.local_rank;
  self.host = options.host.empty() ? Hostname() : options.host;
  self.pid = options.pid != 0 ? options.pid : ::getpid();
  const std::string mine = self.Encode();

  auto fail = [&](absl::Status status) -> absl::Status {
    // Tell the other ranks, so that they stop waiting too. The first error
    // wins.
    (void)store.CompareSet(kErrorKey, "", std::string(status.message()));
    (void)store.Add(kErrorSeenKey, 1);  // Failing counts as having seen it.
    if (self.rank != 0) return status;
    absl::StatusOr<int64_t> claimed = store.Add(kClaimedKey, 0);
    const int64_t present = claimed.ok() ? *claimed : 0;
    const absl::Time until = absl::Now() + kLinger;
    while (absl::Now() < until) {
      absl::StatusOr<int64_t> seen = store.Add(kErrorSeenKey, 0);
      if (!seen.ok() || *seen >= present) break;
      absl::SleepFor(kSlice);
    }
    return status;
  };

  // Claim the rank: a second claimant finds the first one's record.
  absl::StatusOr<std::string> claimed =
      store.CompareSet(RankKey(self.rank), "", mine);
  if (!claimed.ok()) return Prefixed(who, claimed.status());
  if (*claimed != mine) {
    absl::StatusOr<PeerInfo> other = PeerInfo::Decode(*claimed);
    const std::string twice = absl::StrCat(
        who, ": rank ", self.rank, " is claimed twice: by ",
        other.ok() ? other->Describe() : *claimed, " and by ", self.Describe());
    // Ranks that met already are a job under way, which this process is not
    // part of: it is left alone, not told to fail.
    if (RendezvousComplete(store)) {
      return absl::AlreadyExistsError(absl::StrCat(
          twice,
          "; the ranks of this store met already: it belongs to another job "
          "that is running (at the same address)"));
    }
    return fail(absl::AlreadyExistsError(absl::StrCat(
        twice,
        "; two processes were given the same rank, or this store belongs to "
        "another job (at the same address)")));
  }
  if (absl::StatusOr<int64_t> n = store.Add(kClaimedKey, 1); !n.ok())
    return Prefixed(who, n.status());
  // The first rank to arrive fixes the world size; the others must agree.
  // The value names who fixed it: "<size>\t<rank (host, pid)>".
  absl::StatusOr<std::string> agreed =
      store.CompareSet("rdzv/world_size", "",
                       absl::StrCat(self.world_size, "\t", self.Describe()));
  if (!agreed.ok()) return Prefixed(who, agreed.status());
  const std::pair<std::string, std::string> fixed =
      absl::StrSplit(*agreed, absl::MaxSplits('\t', 1));
  if (fixed.first != std::to_string(self.world_size)) {
    return fail(absl::FailedPreconditionError(absl::StrCat(
        who, ": ranks disagree on the world size: ", self.Describe(), " says ",
        self.world_size, ", ", fixed.second, " says ", fixed.first)));
  }

  absl::StatusOr<int64_t> joined = store.Add(kJoinedKey, 1);
  if (!joined.ok()) return Prefixed(who, joined.status());
  if (*joined == self.world_size) {
    if (absl::Status s = store.Set(kCompleteKey, "1"); !s.ok())
      return Prefixed(who, s);
  }
  const std::vector<std::string> complete = {kCompleteKey};
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + options.timeout;
  while (true) {
    const absl::Duration slice = std::min(kSlice, deadline - absl::Now());
    absl::Status s =
        store.Wait(complete, std::max(slice, absl::ZeroDuration()));
    if (s.ok()) break;
    if (s.code() != absl::StatusCode::kDeadlineExceeded)
      return Prefixed(who, s);
    absl::StatusOr<bool> error = store.Check({kErrorKey});
    if (error.ok() && *error) {
      absl::StatusOr<std::string> message =
          store.Get(kErrorKey, absl::Seconds(10));
      (void)store.Add(kErrorSeenKey, 1);
      return absl::AbortedError(absl::StrCat(
          who,
          ": another rank failed: ", message.ok() ? *message : "(unknown)"));
    }
    if (absl::Now() >= deadline) {
      const absl::Duration waited = absl::Now() - start;
      return absl::DeadlineExceededError(
          absl::StrCat(who, " timed out after ", FormatSeconds(waited),
                       " (timeout ", absl::FormatDuration(options.timeout),
                       "): ", DescribeMissing(store, options.world_size)));
    }
  }

  std::vector<PeerInfo> peers(options.world_size);
  for (int r = 0; r < options.world_size; ++r) {
    absl::StatusOr<std::string> record =
        store.Get(RankKey(r), absl::Seconds(10));
    if (!record.ok()) return Prefixed(who, record.status());
    absl::StatusOr<PeerInfo> peer = PeerInfo::Decode(*record);
    if (!peer.ok()) return Prefixed(who, peer.status());
    if (peer->world_size != self.world_size) {
      return fail(absl::FailedPreconditionError(absl::StrCat(
          who, ": ranks disagree on the world size: ", peer->Describe(),
          " says ", peer->world_size, ", ", self.Describe(), " says ",
          self.world_size)));
    }
    peers[r] = *peer;
  }
  return peers;
}

}  // namespace dtrain::rendezvous
