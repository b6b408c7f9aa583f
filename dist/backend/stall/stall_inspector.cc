#include "dist/backend/stall/stall_inspector.h"

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <iostream>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/types/optional.h"
#include "base/process_liveness.h"
#include "base/trace_marks.h"
#include "dist/backend/describe.h"
#include "dist/backend/hierarchical/host_layout.h"

namespace dtrain::backend {
namespace {

// One collective as a rank issued it.
struct Record {
  int64_t seq = 0;  // 0: none yet.
  std::string op;
  std::string label;
  absl::Time issued = absl::UnixEpoch();
};

// "667\t<unix micros>\tallreduce\tbucket 0" in the store.
std::string Encode(const Record& r) {
  return absl::StrCat(r.seq, "\t", absl::ToUnixMicros(r.issued), "\t", r.op,
                      "\t", r.label);
}

bool Decode(absl::string_view text, Record* r) {
  std::vector<std::string> f = absl::StrSplit(text, absl::MaxSplits('\t', 3));
  int64_t micros = 0;
  if (f.size() != 4 || !absl::SimpleAtoi(f[0], &r->seq) ||
      !absl::SimpleAtoi(f[1], &micros))
    return false;
  r->issued = absl::FromUnixMicros(micros);
  r->op = f[2];
  r->label = f[3];
  return true;
}

// "collective #667 (allreduce, bucket 0)": numbered by this layer, counting
// every collective issued through it (a backend's own numbers may differ).
std::string Name(const Record& r) {
  std::string what = r.op;
  if (!r.label.empty())
    absl::StrAppend(&what, what.empty() ? "" : ", ", r.label);
  return absl::StrCat("collective #", r.seq,
                      what.empty() ? "" : absl::StrCat(" (", what, ")"));
}

std::string Key(int rank) { return absl::StrCat("stall/", rank); }
// "<pid> <host key>", published once.
std::string WhoKey(int rank) { return absl::StrCat("stall/who/", rank); }

// How many ticks of the thread may go to reading the peers' identities: a
// peer that has not published by then (it never started) stays unknown.
constexpr int kIdentifyTicks = 40;

}  // namespace

struct StallInspector::State {
  explicit State(StallInspectorOptions o) : options(std::move(o)) {
    if (options.pid == 0) options.pid = ::getpid();
    if (options.host_key.empty()) {
      absl::StatusOr<std::string> key = hierarchical::LocalHostKey();
      if (key.ok()) options.host_key = *key;
    }
    if (!options.alive) options.alive = base::ProcessRunning;
    if (!options.stopped) options.stopped = base::ProcessStopped;
    peer_pids.assign(options.size, 0);
    if (options.rank >= 0 && options.rank < options.size)
      peer_pids[options.rank] = -1;
  }

  StallInspectorOptions options;  // Completed by the constructor.
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  int64_t last_seq = 0;
  Record last;  // The newest collective issued.
  int64_t published = -1;
  struct InFlight {
    Record record;
    // Held until it completes: a caller may drop its handle long before (a
    // CUDA Wait returns once the stream waits), and the collective still
    // waits for its peers.
    std::shared_ptr<Work> work;
    bool warned = false;
  };
  std::deque<InFlight> in_flight;
  // The newest collectives issued, whatever became of them: a failed one's
  // error asks for its description after the loop may have dropped it from
  // in_flight.
  static constexpr size_t kRecent = 64;
  std::deque<Record> recent;
  // Per rank: its pid where it runs on this host, -1 where it runs elsewhere
  // or cannot be checked (or is this rank), 0 while unknown.
  std::vector<int64_t> peer_pids;
  int identify_ticks = 0;
  // The exited peers a warning has named already.
  std::set<int> told_exited;

  // Reads the identities of the peers not known yet, without waiting for
  // those that have not published theirs.
  void Identify() {
    std::vector<int> unknown;
    {
      std::lock_guard<std::mutex> lock(mu);
      for (int r = 0; r < options.size; ++r) {
        if (peer_pids[r] == 0) unknown.push_back(r);
      }
    }
    for (int r : unknown) {
      absl::StatusOr<bool> present = options.store->Check({WhoKey(r)});
      if (!present.ok() || !*present) continue;
      absl::StatusOr<std::string> who =
          options.store->Get(WhoKey(r), absl::Milliseconds(300));
      if (!who.ok()) continue;
      const std::pair<std::string, std::string> parts =
          absl::StrSplit(*who, absl::MaxSplits(' ', 1));
      int64_t pid = 0;
      const bool here = absl::SimpleAtoi(parts.first, &pid) && pid > 0 &&
                        !options.host_key.empty() &&
                        parts.second == options.host_key;
      std::lock_guard<std::mutex> lock(mu);
      peer_pids[r] = here ? pid : -1;
    }
  }

  std::vector<ExitedPeer> Exited() {
    std::vector<ExitedPeer> out;
    std::vector<int64_t> pids;
    {
      std::lock_guard<std::mutex> lock(mu);
      pids = peer_pids;
    }
    for (int r = 0; r < static_cast<int>(pids.size()); ++r) {
      if (pids[r] > 0 && !options.alive(pids[r])) out.push_back({r, pids[r]});
    }
    return out;
  }

  void Warn(const std::string& line) {
    // On the run's trace too, when one is recorded (trainer/trace).
    base::NoteTraceMark(options.rank, "stall warning", line);
    if (options.warn) {
      options.warn(line);
    } else {
      std::cerr << line << std::endl;
    }
  }

  // Reads every other rank's record; runs on a thread of its own so that a
  // store that stopped answering cannot hold the caller past its budget.
  std::string Read(const Record& mine) {
    // A peer that has exited is the whole story (and if it is rank 0, the
    // store went with it).
    Identify();
    const std::vector<ExitedPeer> exited = Exited();
    if (!exited.empty()) {
      std::vector<std::string> named;
      for (const ExitedPeer& e : exited) named.push_back(e.ToString());
      return absl::StrJoin(named, "; ");
    }
    std::vector<int64_t> pids;
    {
      std::lock_guard<std::mutex> lock(mu);
      pids = peer_pids;
    }
    std::vector<std::string> behind;
    std::vector<int> unchecked;  // Peers elsewhere or not identified.
    const absl::Time now = absl::Now();
    for (int r = 0; r < options.size; ++r) {
      if (r == options.rank) continue;
      const bool here = pids[r] > 0;
      if (!here) unchecked.push_back(r);
      const bool stopped = here && options.stopped(pids[r]);
      absl::StatusOr<std::string> value =
          options.store->Get(Key(r), absl::Milliseconds(300));
      Record theirs;
      if (!value.ok() || !Decode(*value, &theirs)) {
        behind.push_back(absl::StrCat(
            "rank ", r,
            stopped ? absl::StrCat(" (pid ", pids[r], ") is stopped and") : "",
            " has left no record",
            value.ok() ? " (unreadable)"
                       : absl::StrCat(" (", value.status().message(), ")")));
        continue;
      }
      const std::string last_seen =
          theirs.seq == 0
              ? "it has issued no collective yet"
              : absl::StrCat("last seen at ", Name(theirs), ", ",
                             FormatElapsed(now - theirs.issued), " ago");
      if (stopped) {
        // Whether or not it issued this one: stopped inside it, it holds the
        // transport up as surely as one that never came.
        behind.push_back(
            absl::StrCat("rank ", r, " (pid ", pids[r],
                         ") is stopped (SIGSTOP or a tracer): ", last_seen));
        continue;
      }
      if (theirs.seq >= mine.seq) continue;  // Joined.
      behind.push_back(absl::StrCat("rank ", r, " has not joined ", Name(mine),
                                    ": ", last_seen));
    }
    if (!behind.empty()) return absl::StrJoin(behind, "; ");
    if (unchecked.empty()) {
      return absl::StrCat("every rank has issued ", Name(mine),
                          ": it is held up in the transport, not by a rank");
    }
    return absl::StrCat(
        "every rank has issued ", Name(mine),
        ": it is held up in the transport or by a rank that cannot be "
        "checked from this host (",
        unchecked.size() == 1 ? "rank " : "ranks ",
        absl::StrJoin(unchecked, ", "), ")");
  }

  // Read(), or for a failure the words Explain() appends.
  std::string ReadOrExplain(const Record& mine,
                            const absl::optional<std::string>& error) {
    if (!error.has_value()) return Read(mine);
    Identify();
    const std::vector<ExitedPeer> exited = Exited();
    if (exited.empty())
      return absl::StrCat(" [stall report: ", Read(mine), "]");
    std::vector<std::string> unsaid;
    for (const ExitedPeer& e : exited) {
      if (!absl::StrContains(*error,
                             absl::StrCat("(pid ", e.pid, ") has exited")))
        unsaid.push_back(e.ToString());
    }
    return unsaid.empty() ? ""
                          : absl::StrCat("; ", absl::StrJoin(unsaid, "; "));
  }

  std::string Report(const Record& mine, const std::shared_ptr<State>& self,
                     absl::optional<std::string> error = absl::nullopt) {
    auto result = std::make_shared<std::promise<std::string>>();
    std::future<std::string> done = result->get_future();
    std::thread([self, mine, error, result] {
      result->set_value(self->ReadOrExplain(mine, error));
    }).detach();
    if (done.wait_for(std::chrono::microseconds(absl::ToInt64Microseconds(
            options.read_budget))) == std::future_status::ready) {
      return done.get();
    }
    const std::string silent = absl::StrCat(
        "the store did not answer within ", FormatElapsed(options.read_budget),
        " (rank 0 hosts it: it may be the rank that is stuck)");
    return error.has_value() ? absl::StrCat(" [stall report: ", silent, "]")
                             : silent;
  }

  // The publishing thread: the newest record to the store when it changed,
  // and a warning for a collective that has waited too long.
  void Loop(const std::shared_ptr<State>& self) {
    const absl::Duration tick =
        std::min(options.publish_every, absl::Milliseconds(250));
    absl::Time next_publish = absl::InfinitePast();
    while (true) {
      Record to_publish;
      bool publish = false;
      std::vector<Record> late;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait_for(lock,
                    std::chrono::microseconds(absl::ToInt64Microseconds(tick)),
                    [&] { return stop; });
        if (stop) return;
        const absl::Time now = absl::Now();
        if (last.seq != published && now >= next_publish) {
          to_publish = last;
          published = last.seq;
          publish = true;
          next_publish = now + options.publish_every;
        }
        while (!in_flight.empty()) {
          if (!in_flight.front().work->IsCompleted()) break;
          in_flight.pop_front();
        }
        for (InFlight& f : in_flight) {
          if (now - f.record.issued < options.warn_after) break;
          if (f.warned || f.work->IsCompleted()) continue;
          f.warned = true;
          late.push_back(f.record);
        }
      }
      if (publish)
        (void)options.store->Set(Key(options.rank), Encode(to_publish));
      if (identify_ticks < kIdentifyTicks) {
        ++identify_ticks;
        Identify();
        std::lock_guard<std::mutex> lock(mu);
        bool all_known = true;
        for (int64_t pid : peer_pids) all_known &= pid != 0;
        if (all_known) identify_ticks = kIdentifyTicks;
      }
      for (const Record& r : late) {
        const std::string waited =
            absl::StrCat("[rank ", options.rank, "] ", Name(r), " has waited ",
                         FormatElapsed(absl::Now() - r.issued), ": ");
        const std::vector<ExitedPeer> exited = Exited();
        if (exited.empty()) {
          Warn(waited + Report(r, self));
          continue;
        }
        // Said once: a later collective waiting for the same gone peer adds
        // nothing.
        std::vector<std::string> news;
        for (const ExitedPeer& e : exited) {
          if (told_exited.insert(e.rank).second) news.push_back(e.ToString());
        }
        if (!news.empty()) Warn(waited + absl::StrJoin(news, "; "));
      }
    }
  }

  std::thread thread;
};

std::string StallInspector::ExitedPeer::ToString() const {
  return absl::StrCat("rank ", rank, " (pid ", pid, ") has exited");
}

StallInspector::StallInspector(StallInspectorOptions options)
    : state_(std::make_shared<State>(std::move(options))) {
  const StallInspectorOptions& o = state_->options;
  (void)o.store->Set(WhoKey(o.rank), absl::StrCat(o.pid, " ", o.host_key));
  // A first record, so that a rank stuck before its first collective is
  // told from one that has not started.
  (void)state_->options.store->Set(Key(state_->options.rank), Encode(Record{}));
  state_->published = 0;
  std::shared_ptr<State> s = state_;
  state_->thread = std::thread([s] { s->Loop(s); });
}

StallInspector::~StallInspector() {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stop = true;
  }
  state_->cv.notify_all();
  // The thread may be in a store call that waits for a server that no
  // longer answers: give it a second, then let it finish on its own.
  auto joined = std::make_shared<std::promise<void>>();
  std::future<void> done = joined->get_future();
  std::thread waiter([s = state_, joined] {
    s->thread.join();
    joined->set_value();
  });
  if (done.wait_for(std::chrono::seconds(1)) == std::future_status::ready) {
    waiter.join();
  } else {
    waiter.detach();
  }
}

int64_t StallInspector::Issued(absl::string_view op, absl::string_view label,
                               std::shared_ptr<Work> work) {
  Record r;
  r.op = std::string(op);
  r.label = std::string(label);
  r.issued = absl::Now();
  std::lock_guard<std::mutex> lock(state_->mu);
  r.seq = ++state_->last_seq;
  state_->last = r;
  state_->recent.push_back(r);
  if (state_->recent.size() > State::kRecent) state_->recent.pop_front();
  state_->in_flight.push_back({std::move(r), work, false});
  return state_->last_seq;
}

std::vector<StallInspector::ExitedPeer> StallInspector::ExitedPeers() {
  return state_->Exited();
}

namespace {

Record Recent(StallInspector::State& state, int64_t seq) {
  Record mine;
  std::lock_guard<std::mutex> lock(state.mu);
  mine.seq = seq;
  for (const Record& r : state.recent) {
    if (r.seq == seq) mine = r;
  }
  return mine;
}

}  // namespace

std::string StallInspector::Report(int64_t seq) {
  return state_->Report(Recent(*state_, seq), state_);
}

std::string StallInspector::Explain(int64_t seq, absl::string_view error) {
  return state_->Report(Recent(*state_, seq), state_, std::string(error));
}

}  // namespace dtrain::backend
