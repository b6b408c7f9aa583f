#include "dist/rendezvous/next_generation.h"

#include <algorithm>
#include <limits>
#include <map>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"

namespace dtrain::rendezvous {
namespace {

// How often the unaccounted members are looked at again.
constexpr absl::Duration kPoll = absl::Milliseconds(20);

std::string Key(int generation, absl::string_view what) {
  return absl::StrCat("elastic/gen/", generation, "/", what);
}

std::string MemberKey(int generation, int rank) {
  return Key(generation, absl::StrCat("member/", rank));
}

// The join queue: a ticket counter, each ticket's member, how many tickets
// were admitted (in order), and each admitted ticket's generation.
constexpr absl::string_view kTickets = "elastic/join/tickets";
constexpr absl::string_view kAdmitted = "elastic/join/admitted";
std::string TicketKey(int64_t ticket) {
  return absl::StrCat("elastic/join/ticket/", ticket);
}
std::string TicketGenerationKey(int64_t ticket) {
  return absl::StrCat(TicketKey(ticket), "/generation");
}

absl::StatusOr<int64_t> Admitted(store::Store& store) {
  DTRAIN_ASSIGN_OR_RETURN(bool any, store.Check({std::string(kAdmitted)}));
  if (!any) return 0;
  DTRAIN_ASSIGN_OR_RETURN(std::string text,
                          store.Get(kAdmitted, absl::Seconds(10)));
  int64_t n = 0;
  if (!absl::SimpleAtoi(text, &n)) {
    return absl::InternalError(absl::StrCat(
        "elastic: a bad admitted count in the store: '", text, "'"));
  }
  return n;
}

// The queued joiners after the admitted ones, at most `limit`, in order.
absl::StatusOr<std::vector<GenerationMember>> Queued(store::Store& store,
                                                     int64_t limit) {
  std::vector<GenerationMember> out;
  if (limit <= 0) return out;
  DTRAIN_ASSIGN_OR_RETURN(const int64_t admitted, Admitted(store));
  DTRAIN_ASSIGN_OR_RETURN(const int64_t tickets, store.Add(kTickets, 0));
  for (int64_t t = admitted + 1; t <= tickets && t <= admitted + limit; ++t) {
    // A ticket is taken before its member is written: a joiner between the
    // two waits for the next generation.
    DTRAIN_ASSIGN_OR_RETURN(bool there, store.Check({TicketKey(t)}));
    if (!there) break;
    DTRAIN_ASSIGN_OR_RETURN(std::string text,
                            store.Get(TicketKey(t), absl::Seconds(10)));
    DTRAIN_ASSIGN_OR_RETURN(GenerationMember m, GenerationMember::Decode(text));
    out.push_back(std::move(m));
  }
  return out;
}

// Where each member records the generation it was formed into; only ever
// raised.
constexpr absl::string_view kLatest = "elastic/latest";

absl::Status RaiseLatest(store::Store& store, int generation) {
  DTRAIN_ASSIGN_OR_RETURN(std::string current,
                          store.CompareSet(kLatest, "", "0"));
  for (;;) {
    int n = 0;
    if (!absl::SimpleAtoi(current, &n)) {
      return absl::InternalError(absl::StrCat(
          "elastic: a bad latest generation in the store: '", current, "'"));
    }
    if (n >= generation) return absl::OkStatus();
    // What the key holds afterwards: ours, or a value raised meanwhile.
    DTRAIN_ASSIGN_OR_RETURN(
        current, store.CompareSet(kLatest, current, absl::StrCat(generation)));
  }
}

// The closed list: members' encodings, one per line, in new-rank order.
absl::StatusOr<std::vector<GenerationMember>> DecodeList(
    absl::string_view text) {
  std::vector<GenerationMember> out;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    DTRAIN_ASSIGN_OR_RETURN(GenerationMember m, GenerationMember::Decode(line));
    out.push_back(std::move(m));
  }
  return out;
}

std::string Ranks(const std::vector<GenerationMember>& members) {
  return absl::StrJoin(members, ", ",
                       [](std::string* out, const GenerationMember& m) {
                         absl::StrAppend(out, m.previous_rank);
                       });
}

absl::StatusOr<Generation> Joined(store::Store& store,
                                  const NextGenerationOptions& o,
                                  std::vector<GenerationMember> members) {
  DTRAIN_RETURN_IF_ERROR(RaiseLatest(store, o.generation));
  // Rank 0 holds the state every rank starts from: the lowest previous rank
  // among those at the highest committed step goes first.
  int64_t highest = 0;
  for (const GenerationMember& m : members)
    highest = std::max(highest, m.committed_step);
  const auto first = std::find_if(
      members.begin(), members.end(),
      [&](const GenerationMember& m) { return m.committed_step == highest; });
  std::rotate(members.begin(), first, first + (first != members.end()));
  Generation g;
  g.generation = o.generation;
  g.world_size = static_cast<int>(members.size());
  g.rank = -1;
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i].previous_rank == o.self.previous_rank &&
        members[i].pid == o.self.pid && members[i].host == o.self.host) {
      g.rank = static_cast<int>(i);
    }
    g.committed_step = std::max(g.committed_step, members[i].committed_step);
  }
  if (g.rank < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", o.self.previous_rank, " was left out of generation ",
        o.generation, ", which ranks ", Ranks(members),
        " formed without it (it was stopped or came too late)"));
  }
  g.members = std::move(members);
  return g;
}

}  // namespace

std::string GenerationMember::Encode() const {
  return absl::StrCat(previous_rank, " ", committed_step, " ", pid, " ",
                      standby.empty() ? "-" : standby, " ", host);
}

absl::StatusOr<GenerationMember> GenerationMember::Decode(
    absl::string_view text) {
  const std::vector<std::string> parts =
      absl::StrSplit(text, absl::MaxSplits(' ', 4));
  GenerationMember m;
  if (parts.size() != 5 || !absl::SimpleAtoi(parts[0], &m.previous_rank) ||
      !absl::SimpleAtoi(parts[1], &m.committed_step) ||
      !absl::SimpleAtoi(parts[2], &m.pid) || parts[3].empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a generation member: '", text, "'"));
  }
  m.standby = parts[3];
  m.host = parts[4];
  return m;
}

absl::StatusOr<Generation> FormNextGeneration(store::Store& store,
                                              const NextGenerationOptions& o) {
  const int n = o.previous_world_size;
  if (n < 1 || o.self.previous_rank < 0 || o.self.previous_rank >= n ||
      o.min_ranks < 1 || o.generation < 1 || !o.probe) {
    return absl::InvalidArgumentError(absl::StrCat(
        "next generation ", o.generation, ": bad options (rank ",
        o.self.previous_rank, " of ", n, ", min_ranks ", o.min_ranks, ")"));
  }
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + o.timeout;
  const std::string list_key = Key(o.generation, "members");
  DTRAIN_RETURN_IF_ERROR(store.Set(
      MemberKey(o.generation, o.self.previous_rank), o.self.Encode()));

  std::map<int, GenerationMember> registered;
  std::map<int, absl::Time> stopped_since;
  while (true) {
    DTRAIN_ASSIGN_OR_RETURN(bool closed, store.Check({list_key}));
    if (closed) {
      DTRAIN_ASSIGN_OR_RETURN(std::string list,
                              store.Get(list_key, absl::Seconds(10)));
      DTRAIN_ASSIGN_OR_RETURN(std::vector<GenerationMember> members,
                              DecodeList(list));
      return Joined(store, o, std::move(members));
    }
    // Who is accounted for: registered, gone, or stopped past the grace.
    std::vector<int> waiting;
    std::vector<int> gone;
    for (int r = 0; r < n; ++r) {
      if (registered.count(r) > 0) continue;
      const std::string key = MemberKey(o.generation, r);
      DTRAIN_ASSIGN_OR_RETURN(bool there, store.Check({key}));
      if (there) {
        DTRAIN_ASSIGN_OR_RETURN(std::string text,
                                store.Get(key, absl::Seconds(10)));
        DTRAIN_ASSIGN_OR_RETURN(registered[r], GenerationMember::Decode(text));
        continue;
      }
      const PeerState state = o.probe(r);
      if (state == PeerState::kGone) {
        gone.push_back(r);
      } else if (state == PeerState::kStopped) {
        const absl::Time since =
            stopped_since.emplace(r, absl::Now()).first->second;
        if (absl::Now() - since < o.stopped_grace) {
          waiting.push_back(r);
        } else {
          gone.push_back(r);
        }
      } else {
        stopped_since.erase(r);
        waiting.push_back(r);
      }
    }
    if (waiting.empty()) {
      std::vector<GenerationMember> members;
      for (const auto& [r, m] : registered) members.push_back(m);
      if (static_cast<int>(members.size()) < o.min_ranks) {
        return absl::FailedPreconditionError(absl::StrCat(
            "generation ", o.generation, ": ", members.size(), " ranks left (",
            Ranks(members), "), fewer than the minimum ", o.min_ranks,
            "; gone: ", absl::StrJoin(gone, ", ")));
      }
      if (o.admit_joiners) {
        const int64_t room =
            o.max_ranks > 0 ? o.max_ranks - static_cast<int64_t>(members.size())
                            : std::numeric_limits<int64_t>::max();
        DTRAIN_ASSIGN_OR_RETURN(std::vector<GenerationMember> joiners,
                                Queued(store, room));
        for (GenerationMember& j : joiners) members.push_back(std::move(j));
      }
      std::string list;
      for (const GenerationMember& m : members)
        absl::StrAppend(&list, m.Encode(), "\n");
      // The first proposal stands; every rank reads it back.
      DTRAIN_ASSIGN_OR_RETURN(std::string agreed,
                              store.CompareSet(list_key, "", list));
      DTRAIN_ASSIGN_OR_RETURN(std::vector<GenerationMember> final_members,
                              DecodeList(agreed));
      return Joined(store, o, std::move(final_members));
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "generation ", o.generation, " not formed within ",
          absl::FormatDuration(o.timeout), ": waiting for ranks ",
          absl::StrJoin(waiting, ", "), " (alive or stopped, not registered)"));
    }
    absl::SleepFor(kPoll);
  }
}

absl::StatusOr<int> LatestGeneration(store::Store& store) {
  DTRAIN_ASSIGN_OR_RETURN(bool any, store.Check({std::string(kLatest)}));
  if (!any) return 0;
  DTRAIN_ASSIGN_OR_RETURN(std::string text,
                          store.Get(kLatest, absl::Seconds(10)));
  int n = 0;
  if (!absl::SimpleAtoi(text, &n)) {
    return absl::InternalError(absl::StrCat(
        "elastic: a bad latest generation in the store: '", text, "'"));
  }
  return n;
}

absl::Status AdmitJoiners(store::Store& store, const Generation& g) {
  int64_t last = 0;
  for (const GenerationMember& m : g.members) {
    if (!m.joiner()) continue;
    DTRAIN_RETURN_IF_ERROR(store.Set(TicketGenerationKey(-m.previous_rank),
                                     absl::StrCat(g.generation)));
    last = std::max<int64_t>(last, -m.previous_rank);
  }
  if (last == 0) return absl::OkStatus();
  return store.Set(kAdmitted, absl::StrCat(last));
}

absl::StatusOr<int64_t> QueuedJoiners(store::Store& store) {
  DTRAIN_ASSIGN_OR_RETURN(const int64_t tickets, store.Add(kTickets, 0));
  if (tickets == 0) return 0;
  DTRAIN_ASSIGN_OR_RETURN(const int64_t admitted, Admitted(store));
  return std::max<int64_t>(0, tickets - admitted);
}

absl::StatusOr<Generation> JoinNextGeneration(store::Store& store,
                                              GenerationMember self,
                                              absl::Duration timeout) {
  DTRAIN_ASSIGN_OR_RETURN(const int64_t ticket, store.Add(kTickets, 1));
  self.previous_rank = static_cast<int>(-ticket);
  self.committed_step = -1;
  DTRAIN_RETURN_IF_ERROR(store.Set(TicketKey(ticket), self.Encode()));
  absl::StatusOr<std::string> admitted =
      store.Get(TicketGenerationKey(ticket), timeout);
  if (!admitted.ok()) {
    if (absl::IsDeadlineExceeded(admitted.status())) {
      return absl::DeadlineExceededError(absl::StrCat(
          "joining: no generation admitted this process (ticket ", ticket,
          ") within ", absl::FormatDuration(timeout),
          ": the job is at its maximum of ranks, or not between steps"));
    }
    return admitted.status();
  }
  int generation = 0;
  if (!absl::SimpleAtoi(*admitted, &generation)) {
    return absl::InternalError(absl::StrCat(
        "joining: a bad generation in the store: '", *admitted, "'"));
  }
  DTRAIN_ASSIGN_OR_RETURN(
      std::string list,
      store.Get(Key(generation, "members"), absl::Seconds(10)));
  DTRAIN_ASSIGN_OR_RETURN(std::vector<GenerationMember> members,
                          DecodeList(list));
  NextGenerationOptions o;
  o.generation = generation;
  o.self = self;
  return Joined(store, o, std::move(members));
}

}  // namespace dtrain::rendezvous
