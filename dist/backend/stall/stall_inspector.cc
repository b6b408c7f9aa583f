#include "dist/backend/stall/stall_inspector.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <iostream>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "dist/backend/describe.h"

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

}  // namespace

struct StallInspector::State {
  explicit State(StallInspectorOptions o) : options(std::move(o)) {}

  const StallInspectorOptions options;
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  int64_t last_seq = 0;
  Record last;  // The newest collective issued.
  int64_t published = -1;
  struct InFlight {
    Record record;
    std::weak_ptr<Work> work;  // Not owned: the caller decides its lifetime.
    bool warned = false;
  };
  std::deque<InFlight> in_flight;
  // The newest collectives issued, whatever became of them: a failed one's
  // error asks for its description after the loop may have dropped it from
  // in_flight.
  static constexpr size_t kRecent = 64;
  std::deque<Record> recent;

  void Warn(const std::string& line) {
    if (options.warn) {
      options.warn(line);
    } else {
      std::cerr << line << std::endl;
    }
  }

  // Reads every other rank's record; runs on a thread of its own so that a
  // store that stopped answering cannot hold the caller past its budget.
  std::string Read(const Record& mine) {
    std::vector<std::string> behind;
    int joined = 0;
    const absl::Time now = absl::Now();
    for (int r = 0; r < options.size; ++r) {
      if (r == options.rank) continue;
      absl::StatusOr<std::string> value =
          options.store->Get(Key(r), absl::Milliseconds(300));
      Record theirs;
      if (!value.ok() || !Decode(*value, &theirs)) {
        behind.push_back(absl::StrCat(
            "rank ", r, " has left no record",
            value.ok() ? " (unreadable)"
                       : absl::StrCat(" (", value.status().message(), ")")));
        continue;
      }
      if (theirs.seq >= mine.seq) {
        ++joined;
        continue;
      }
      behind.push_back(absl::StrCat(
          "rank ", r, " has not joined ", Name(mine), ": ",
          theirs.seq == 0
              ? "it has issued no collective yet"
              : absl::StrCat("last seen at ", Name(theirs), ", ",
                             FormatElapsed(now - theirs.issued), " ago")));
    }
    if (behind.empty()) {
      return absl::StrCat("every rank has issued ", Name(mine),
                          ": it is held up in the transport, not by a rank");
    }
    return absl::StrJoin(behind, "; ");
  }

  std::string Report(const Record& mine, const std::shared_ptr<State>& self) {
    auto result = std::make_shared<std::promise<std::string>>();
    std::future<std::string> done = result->get_future();
    std::thread([self, mine, result] {
      result->set_value(self->Read(mine));
    }).detach();
    if (done.wait_for(std::chrono::microseconds(absl::ToInt64Microseconds(
            options.read_budget))) == std::future_status::ready) {
      return done.get();
    }
    return absl::StrCat("the store did not answer within ",
                        FormatElapsed(options.read_budget),
                        " (rank 0 hosts it: it may be the rank that is stuck)");
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
          std::shared_ptr<Work> w = in_flight.front().work.lock();
          if (w != nullptr && !w->IsCompleted()) break;
          in_flight.pop_front();
        }
        for (InFlight& f : in_flight) {
          if (now - f.record.issued < options.warn_after) break;
          std::shared_ptr<Work> w = f.work.lock();
          if (f.warned || w == nullptr || w->IsCompleted()) continue;
          f.warned = true;
          late.push_back(f.record);
        }
      }
      if (publish)
        (void)options.store->Set(Key(options.rank), Encode(to_publish));
      for (const Record& r : late) {
        Warn(absl::StrCat("[rank ", options.rank, "] ", Name(r), " has waited ",
                          FormatElapsed(absl::Now() - r.issued), ": ",
                          Report(r, self)));
      }
    }
  }

  std::thread thread;
};

StallInspector::StallInspector(StallInspectorOptions options)
    : state_(std::make_shared<State>(std::move(options))) {
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

std::string StallInspector::Report(int64_t seq) {
  Record mine;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    mine.seq = seq;
    for (const Record& r : state_->recent) {
      if (r.seq == seq) mine = r;
    }
  }
  return state_->Report(mine, state_);
}

}  // namespace dtrain::backend
