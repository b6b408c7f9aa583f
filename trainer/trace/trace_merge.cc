#include "trainer/trace/trace_merge.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <limits>
#include <set>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "base/atomic_file.h"
#include "base/posix_io.h"

namespace dtrain::trainer {
namespace {

std::string PartKey(const TraceMergeSetup& s, int rank) {
  return absl::StrCat(s.prefix, "/part/", rank);
}

std::string OffsetKey(const TraceMergeSetup& s, int rank) {
  return absl::StrCat(s.prefix, "/offset/", rank);
}

// Set by rank 0 when it is ready to answer `rank`'s clock questions.
std::string GoKey(const TraceMergeSetup& s, int rank) {
  return absl::StrCat(s.prefix, "/go/", rank);
}

const char* Category(int track) {
  switch (track) {
    case StepTrace::kStepsTrack:
      return "step";
    case StepTrace::kPhasesTrack:
      return "phase";
    case StepTrace::kEventsTrack:
      return "event";
    default:
      return "bucket";
  }
}

// "offset_ns error_ns round_trip_ns rounds", and back.
std::string EncodeOffset(const store::ClockOffset& c) {
  return absl::StrCat(absl::ToInt64Nanoseconds(c.offset), " ",
                      absl::ToInt64Nanoseconds(c.error), " ",
                      absl::ToInt64Nanoseconds(c.round_trip), " ", c.rounds);
}

bool DecodeOffset(absl::string_view text, store::ClockOffset* c) {
  std::vector<absl::string_view> f = absl::StrSplit(text, ' ');
  int64_t offset = 0, error = 0, trip = 0;
  if (f.size() != 4 || !absl::SimpleAtoi(f[0], &offset) ||
      !absl::SimpleAtoi(f[1], &error) || !absl::SimpleAtoi(f[2], &trip) ||
      !absl::SimpleAtoi(f[3], &c->rounds)) {
    return false;
  }
  c->offset = absl::Nanoseconds(offset);
  c->error = absl::Nanoseconds(error);
  c->round_trip = absl::Nanoseconds(trip);
  return true;
}

std::string Seconds(absl::Duration d) {
  return absl::StrFormat("%.1f s", absl::ToDoubleSeconds(d));
}

// Rank 0's side: every other rank's part within the timeout in all (at least
// a moment each, so that parts already sent are still read), then the clocks
// of those that sent one, each step of it bounded: a missing rank costs the
// others nothing but the wait for its part.
std::vector<RankTrace> Gather(const StepTrace& mine, const TraceMergeSetup& s) {
  std::vector<RankTrace> ranks(s.world_size);
  ranks[0].records = mine.Records();
  ranks[0].clock_known = true;
  const absl::Time deadline = absl::Now() + s.timeout;
  auto left = [&] {
    return std::max(deadline - absl::Now(), absl::Milliseconds(100));
  };
  for (int r = 1; r < s.world_size; ++r) {
    RankTrace& part = ranks[r];
    part.rank = r;
    absl::StatusOr<std::string> bytes = s.store->Get(PartKey(s, r), left());
    if (!bytes.ok()) {
      part.missing =
          absl::StrCat("sent no trace within ", Seconds(s.timeout),
                       " of rank 0's merge (", bytes.status().message(), ")");
      continue;
    }
    absl::StatusOr<std::vector<TraceRecord>> records =
        StepTrace::Decode(*bytes);
    if (!records.ok()) {
      part.missing = std::string(records.status().message());
      continue;
    }
    part.records = *std::move(records);
  }
  for (int r = 1; r < s.world_size; ++r) {
    RankTrace& part = ranks[r];
    if (!part.missing.empty()) continue;
    absl::Status st = s.store->Set(GoKey(s, r), "");
    if (st.ok()) {
      st = store::AnswerClock(*s.store, s.prefix, r, kTraceClockRounds,
                              kTraceClockStepTimeout);
    }
    absl::StatusOr<std::string> offset =
        st.ok() ? s.store->Get(OffsetKey(s, r), kTraceClockStepTimeout)
                : absl::StatusOr<std::string>(st);
    if (offset.ok() && DecodeOffset(*offset, &part.clock)) {
      part.clock_known = true;
    } else {
      part.missing = absl::StrCat(
          "its clock could not be measured (",
          offset.ok() ? "a malformed offset" : offset.status().message(),
          "): its times are its own clock's");
    }
  }
  return ranks;
}

}  // namespace

base::ChromeTrace BuildChromeTrace(const std::vector<RankTrace>& ranks,
                                   int64_t first_step, int64_t last_step) {
  base::ChromeTrace trace;
  auto offset_us = [](const RankTrace& r) {
    return absl::ToInt64Microseconds(r.clock.offset);
  };
  int64_t origin = std::numeric_limits<int64_t>::max();
  for (const RankTrace& r : ranks) {
    for (const TraceRecord& rec : r.records)
      origin = std::min(origin, rec.start_us + offset_us(r));
  }
  if (origin == std::numeric_limits<int64_t>::max()) origin = 0;
  std::vector<std::string> missing;
  for (const RankTrace& r : ranks) {
    trace.NameProcess(r.rank, absl::StrCat("rank ", r.rank));
    if (!r.missing.empty()) {
      missing.push_back(absl::StrCat("rank ", r.rank, ": ", r.missing));
    }
    if (!r.records.empty() || r.rank == 0) {
      trace.SetNote(absl::StrCat("clock_offset_us/rank", r.rank),
                    r.clock_known ? absl::StrCat(offset_us(r)) : "unknown");
      trace.SetNote(absl::StrCat("clock_error_us/rank", r.rank),
                    r.clock_known
                        ? absl::StrCat(absl::ToInt64Microseconds(
                              absl::Ceil(r.clock.error, absl::Microseconds(1))))
                        : "unknown");
    }
    std::set<int> tracks;
    for (const TraceRecord& rec : r.records) {
      if (tracks.insert(rec.track).second) {
        trace.NameTrack(r.rank, rec.track, StepTrace::TrackName(rec.track));
      }
      const int64_t ts = rec.start_us + offset_us(r) - origin;
      if (rec.instant) {
        base::TraceInstant i;
        i.name = rec.name;
        i.category = Category(rec.track);
        i.at_us = ts;
        i.pid = r.rank;
        i.tid = rec.track;
        if (!rec.text.empty()) i.texts.emplace_back("message", rec.text);
        trace.Add(std::move(i));
        continue;
      }
      base::TraceSlice s;
      s.name = rec.name;
      s.category = Category(rec.track);
      s.start_us = ts;
      s.duration_us = rec.end_us - rec.start_us;
      s.pid = r.rank;
      s.tid = rec.track;
      if (rec.step > 0) s.numbers.emplace_back("step", rec.step);
      if (rec.bytes >= 0) {
        s.numbers.emplace_back("bytes", static_cast<double>(rec.bytes));
      }
      if (!rec.text.empty()) s.texts.emplace_back("note", rec.text);
      trace.Add(std::move(s));
    }
  }
  trace.SetNote("ranks", absl::StrCat(ranks.size()));
  trace.SetNote("steps", absl::StrCat(first_step, ":", last_step));
  trace.SetNote("origin_unix_us", absl::StrCat(origin));
  trace.SetNote(
      "clock_alignment",
      absl::StrCat("every rank's times are on rank 0's clock: a rank's "
                   "clock_offset_us was added to them, measured through the "
                   "store by Cristian's algorithm (the shortest of ",
                   kTraceClockRounds,
                   " round trips); the true offset is within "
                   "clock_error_us of it"));
  if (!missing.empty()) trace.SetNote("missing", absl::StrJoin(missing, "; "));
  return trace;
}

absl::Status MergeTrace(const StepTrace& trace, const TraceMergeSetup& s) {
  if (s.rank != 0) {
    auto failed = [&](absl::string_view what, const absl::Status& st) {
      return absl::Status(st.code(),
                          absl::StrCat("trace: ", what, ": ", st.message()));
    };
    if (absl::Status st = s.store->Set(PartKey(s, s.rank), trace.Encode());
        !st.ok()) {
      return failed("sending this rank's part to rank 0", st);
    }
    if (absl::StatusOr<std::string> go =
            s.store->Get(GoKey(s, s.rank), 2 * s.timeout);
        !go.ok()) {
      return failed("waiting for rank 0 to measure this rank's clock",
                    go.status());
    }
    absl::StatusOr<store::ClockOffset> clock = store::AskClock(
        *s.store, s.prefix, s.rank, kTraceClockRounds, kTraceClockStepTimeout);
    if (!clock.ok()) {
      return failed("measuring this rank's clock against rank 0's",
                    clock.status());
    }
    if (absl::Status st =
            s.store->Set(OffsetKey(s, s.rank), EncodeOffset(*clock));
        !st.ok()) {
      return failed("sending the clock's offset to rank 0", st);
    }
    return absl::OkStatus();
  }
  const std::vector<RankTrace> ranks = Gather(trace, s);
  const std::string json =
      BuildChromeTrace(ranks, trace.first_step(), trace.last_step()).ToJson();
  if (absl::Status st = base::WriteFileAtomically(s.path, json); !st.ok()) {
    return absl::Status(st.code(), absl::StrCat("--trace: ", st.message()));
  }
  return absl::OkStatus();
}

absl::Status CheckTracePath(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : path.substr(0, slash);
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--trace=", path, ": cannot write in ", dir, ": ",
                     base::ErrnoText(errno)));
  }
  return absl::OkStatus();
}

}  // namespace dtrain::trainer
