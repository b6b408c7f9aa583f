#include "tools/flight_analyze/flight_analysis.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/types/optional.h"
#include "nlohmann/json.hpp"

namespace dtrain::tools {
namespace {

using backend::FlightEntry;
using Json = nlohmann::json;

absl::Status Bad(absl::string_view source, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat(source, ": not a flight recorder dump: ", what));
}

absl::optional<absl::Time> TimeOf(const Json& v) {
  if (!v.is_number()) return absl::nullopt;
  return absl::UnixEpoch() + absl::Seconds(v.get<double>());
}

absl::StatusOr<FlightEntry::State> StateOf(const std::string& s) {
  if (s == "issued") return FlightEntry::State::kIssued;
  if (s == "started") return FlightEntry::State::kStarted;
  if (s == "completed") return FlightEntry::State::kCompleted;
  if (s == "failed") return FlightEntry::State::kFailed;
  return absl::InvalidArgumentError(absl::StrCat("state '", s, "'"));
}

const char* StateWord(FlightEntry::State s) {
  switch (s) {
    case FlightEntry::State::kIssued:
      return "issued, not started";
    case FlightEntry::State::kStarted:
      return "started, not finished";
    case FlightEntry::State::kCompleted:
      return "completed";
    case FlightEntry::State::kFailed:
      return "failed";
  }
  return "";
}

bool Finished(const FlightEntry& e) {
  return e.state == FlightEntry::State::kCompleted ||
         e.state == FlightEntry::State::kFailed;
}

// "allreduce (sum, 4 x float32 = 16 B)".
std::string What(const FlightEntry& e) {
  return e.details.empty() ? e.op : absl::StrCat(e.op, " (", e.details, ")");
}

std::string RankList(const std::vector<int>& ranks) {
  return absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ",
                      absl::StrJoin(ranks, ", "));
}

// One backend's collectives per rank, by number.
using Timeline = std::map<int, std::map<int64_t, const FlightEntry*>>;

}  // namespace

absl::StatusOr<FlightDump> ParseFlightDump(absl::string_view json,
                                           absl::string_view source) {
  const Json j = Json::parse(json.begin(), json.end(), nullptr,
                             /*allow_exceptions=*/false);
  if (j.is_discarded()) return Bad(source, "not JSON");
  if (!j.is_object() || !j.contains("format") ||
      j["format"] != "dtrain.flight_recorder.v1") {
    return Bad(source, "no \"format\": \"dtrain.flight_recorder.v1\"");
  }
  FlightDump d;
  d.source = std::string(source);
  if (!j.contains("rank") || !j["rank"].is_number_integer())
    return Bad(source, "no integer \"rank\"");
  d.rank = j["rank"].get<int>();
  if (j.contains("world_size") && j["world_size"].is_number_integer())
    d.world_size = j["world_size"].get<int>();
  if (j.contains("reason") && j["reason"].is_string())
    d.reason = j["reason"].get<std::string>();
  if (j.contains("dumped_at") && j["dumped_at"].is_number())
    d.dumped_at = *TimeOf(j["dumped_at"]);
  if (!j.contains("entries") || !j["entries"].is_array())
    return Bad(source, "no \"entries\" array");
  for (size_t i = 0; i < j["entries"].size(); ++i) {
    const Json& e = j["entries"][i];
    const std::string where = absl::StrCat("entries[", i, "]");
    if (!e.is_object())
      return Bad(source, absl::StrCat(where, " is no object"));
    for (const char* key : {"backend", "op", "details", "state"}) {
      if (!e.contains(key) || !e[key].is_string())
        return Bad(source, absl::StrCat(where, " has no string \"", key, "\""));
    }
    for (const char* key : {"instance", "rank", "seq"}) {
      if (!e.contains(key) || !e[key].is_number_integer())
        return Bad(source,
                   absl::StrCat(where, " has no integer \"", key, "\""));
    }
    FlightEntry entry;
    entry.backend = e["backend"].get<std::string>();
    entry.instance = e["instance"].get<int>();
    entry.rank = e["rank"].get<int>();
    entry.seq = e["seq"].get<int64_t>();
    entry.op = e["op"].get<std::string>();
    entry.details = e["details"].get<std::string>();
    absl::StatusOr<FlightEntry::State> state =
        StateOf(e["state"].get<std::string>());
    if (!state.ok())
      return Bad(source, absl::StrCat(where, ": ", state.status().message()));
    entry.state = *state;
    if (e.contains("issued"))
      entry.issued = TimeOf(e["issued"]).value_or(absl::UnixEpoch());
    if (e.contains("started")) entry.started = TimeOf(e["started"]);
    if (e.contains("finished")) entry.finished = TimeOf(e["finished"]);
    if (e.contains("error") && e["error"].is_string())
      entry.error = e["error"].get<std::string>();
    d.entries.push_back(std::move(entry));
  }
  return d;
}

std::vector<FlightFinding> AnalyzeFlightDumps(
    const std::vector<FlightDump>& dumps, int world_size) {
  std::map<std::string, Timeline> backends;
  std::set<int> dumped;
  std::map<int, absl::Time> dumped_at;  // Per rank: when its dump was written.
  int largest_world = 0;
  for (const FlightDump& d : dumps) {
    if (d.rank >= 0) dumped.insert(d.rank);
    largest_world = std::max(largest_world, d.world_size);
    for (const FlightEntry& e : d.entries) {
      backends[absl::StrCat(e.backend, "/", e.instance)][e.rank][e.seq] = &e;
      dumped.insert(e.rank);
      dumped_at[e.rank] = d.dumped_at;
    }
  }
  if (world_size <= 0) {
    world_size = largest_world;
    if (!dumped.empty())
      world_size = std::max(world_size, *dumped.rbegin() + 1);
  }

  std::vector<FlightFinding> disagreements, no_dump, unfinished;
  // The collective each backend's ranks last agreed on, for the no-dump
  // finding.
  std::vector<std::pair<std::string, const FlightEntry*>> last_common;
  for (const auto& [name, timeline] : backends) {
    // Before the latest first entry some ring dropped what it held.
    int64_t from = 0, to = 0;
    for (const auto& [rank, by_seq] : timeline) {
      from = std::max(from, by_seq.begin()->first);
      to = std::max(to, by_seq.rbegin()->first);
    }
    bool found = false;
    const FlightEntry* last_all = nullptr;
    for (int64_t n = from; n <= to && !found; ++n) {
      std::map<std::string, std::vector<int>> issued_as;
      std::vector<int> absent;
      const FlightEntry* any = nullptr;
      for (const auto& [rank, by_seq] : timeline) {
        auto it = by_seq.find(n);
        if (it == by_seq.end()) {
          absent.push_back(rank);
        } else {
          issued_as[What(*it->second)].push_back(rank);
          any = it->second;
        }
      }
      if (issued_as.size() > 1) {
        FlightFinding f{FlightFinding::Kind::kMismatch, name, n, {}, ""};
        std::vector<std::string> parts;
        for (const auto& [what, ranks] : issued_as) {
          parts.push_back(absl::StrCat(RankList(ranks), ": ", what));
          f.ranks.insert(f.ranks.end(), ranks.begin(), ranks.end());
        }
        f.message =
            absl::StrCat("the ranks issued different collectives as ", name,
                         " #", n, ": ", absl::StrJoin(parts, "; "));
        disagreements.push_back(std::move(f));
        found = true;
      } else if (!absent.empty() && any != nullptr) {
        std::vector<int> present = issued_as.begin()->second;
        absl::Time first_issued = absl::InfiniteFuture();
        for (int r : present)
          first_issued = std::min(first_issued, timeline.at(r).at(n)->issued);
        bool before = false;
        for (int r : absent) before = before || dumped_at[r] < first_issued;
        if (before) {
          // That rank's dump predates the collective: it may yet issue it.
          found = true;
          break;
        }
        FlightFinding f{FlightFinding::Kind::kMissing, name, n, absent, ""};
        std::vector<std::string> lasts;
        for (int r : absent) {
          const FlightEntry& last = *timeline.at(r).rbegin()->second;
          lasts.push_back(absl::StrCat("rank ", r, "'s last was #", last.seq,
                                       " (", What(last), ", ",
                                       StateWord(last.state), ")"));
        }
        std::vector<std::string> states;
        for (int r : present) {
          states.push_back(absl::StrCat(
              "rank ", r, " ", StateWord(timeline.at(r).at(n)->state)));
        }
        f.message = absl::StrCat(
            RankList(absent), " never issued ", name, " #", n, " (", What(*any),
            "), which ", RankList(present), " issued (",
            absl::StrJoin(states, ", "), "); ", absl::StrJoin(lasts, "; "));
        disagreements.push_back(std::move(f));
        found = true;
      } else if (any != nullptr) {
        last_all = any;
      }
    }
    if (found) continue;
    if (last_all != nullptr) last_common.emplace_back(name, last_all);
    // Every rank issued the same: the last one some rank never finished.
    for (int64_t n = to; n >= from; --n) {
      std::vector<int> open, done;
      for (const auto& [rank, by_seq] : timeline) {
        auto it = by_seq.find(n);
        if (it == by_seq.end()) continue;
        (Finished(*it->second) ? done : open).push_back(rank);
      }
      if (open.empty()) break;
      bool earlier_open = false;
      for (const auto& [rank, by_seq] : timeline) {
        auto it = by_seq.find(n - 1);
        if (it != by_seq.end() && !Finished(*it->second)) earlier_open = true;
      }
      if (earlier_open) continue;
      const FlightEntry& e = *timeline.begin()->second.at(n);
      FlightFinding f{FlightFinding::Kind::kUnfinished, name, n, open, ""};
      f.message = absl::StrCat(
          "every rank issued ", name, " #", n, " (", What(e), "); ",
          RankList(open), " never finished it",
          done.empty() ? "" : absl::StrCat(", which ", RankList(done), " did"));
      unfinished.push_back(std::move(f));
      break;
    }
  }
  std::vector<int> missing;
  for (int r = 0; r < world_size; ++r) {
    if (dumped.count(r) == 0) missing.push_back(r);
  }
  if (!missing.empty()) {
    FlightFinding f{FlightFinding::Kind::kNoDump, "", 0, missing, ""};
    f.message = absl::StrCat(
        RankList(missing), " of ", world_size,
        " left no dump: stopped, killed, or never reached a failure");
    std::vector<std::string> where;
    for (const auto& [name, e] : last_common) {
      where.push_back(absl::StrCat(name, " #", e->seq, " (", What(*e), ")"));
    }
    if (!where.empty()) {
      absl::StrAppend(&f.message, "; the others' last collective in common: ",
                      absl::StrJoin(where, ", "));
    }
    no_dump.push_back(std::move(f));
  }
  std::vector<FlightFinding> out = std::move(disagreements);
  out.insert(out.end(), no_dump.begin(), no_dump.end());
  out.insert(out.end(), unfinished.begin(), unfinished.end());
  return out;
}

std::string SummarizeFlightDumps(const std::vector<FlightDump>& dumps) {
  std::map<std::pair<int, std::string>,
           std::pair<const FlightEntry*, const FlightEntry*>>
      rows;  // (rank, backend) -> (last issued, last finished)
  for (const FlightDump& d : dumps) {
    for (const FlightEntry& e : d.entries) {
      auto& [issued, finished] =
          rows[{e.rank, absl::StrCat(e.backend, "/", e.instance)}];
      if (issued == nullptr || e.seq > issued->seq) issued = &e;
      if (Finished(e) && (finished == nullptr || e.seq > finished->seq))
        finished = &e;
    }
  }
  std::string out = "rank  backend          last issued  last finished\n";
  for (const auto& [key, row] : rows) {
    absl::StrAppend(
        &out, absl::StrFormat("%4d  %-15s  %11s  %13s  %s\n", key.first,
                              key.second, absl::StrCat("#", row.first->seq),
                              row.second != nullptr
                                  ? absl::StrCat("#", row.second->seq)
                                  : std::string("-"),
                              What(*row.first)));
  }
  return out;
}

}  // namespace dtrain::tools
