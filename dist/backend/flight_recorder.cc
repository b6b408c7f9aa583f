#include "dist/backend/flight_recorder.h"

#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/atomic_file.h"
#include "nlohmann/json.hpp"

namespace dtrain::backend {
namespace {

constexpr size_t kDefaultCapacity = 2048;

size_t CapacityFromEnvironment() {
  const char* text = std::getenv("DTRAIN_FLIGHT_RECORDER");
  if (text == nullptr || *text == '\0') return kDefaultCapacity;
  uint64_t n = 0;
  if (!absl::SimpleAtoi(text, &n) || n > (uint64_t{1} << 24)) {
    std::cerr << "warning: DTRAIN_FLIGHT_RECORDER='" << text
              << "' is not a number of collectives up to 16777216; keeping the "
                 "last "
              << kDefaultCapacity << "\n";
    return kDefaultCapacity;
  }
  return static_cast<size_t>(n);
}

const char* StateName(FlightEntry::State s) {
  switch (s) {
    case FlightEntry::State::kIssued:
      return "issued";
    case FlightEntry::State::kStarted:
      return "started";
    case FlightEntry::State::kCompleted:
      return "completed";
    case FlightEntry::State::kFailed:
      return "failed";
  }
  return "issued";
}

nlohmann::json Seconds(const absl::optional<absl::Time>& t) {
  if (!t.has_value()) return nullptr;
  return absl::ToDoubleSeconds(*t - absl::UnixEpoch());
}

}  // namespace

FlightRecorder::FlightRecorder(size_t capacity)
    : ring_(capacity), tickets_(capacity, -1) {}

FlightRecorder& FlightRecorder::Process() {
  static FlightRecorder* recorder =
      new FlightRecorder(CapacityFromEnvironment());
  return *recorder;
}

int FlightRecorder::NextInstance(absl::string_view backend, int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [key, count] : instances_) {
    if (key.first == backend && key.second == rank) return count++;
  }
  instances_.push_back({{std::string(backend), rank}, 1});
  return 0;
}

int64_t FlightRecorder::Issued(absl::string_view backend, int instance,
                               int rank, int64_t seq, absl::string_view op,
                               absl::string_view details) {
  if (ring_.empty()) return -1;
  const absl::Time now = absl::Now();
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t ticket = next_ticket_++;
  const size_t slot = static_cast<size_t>(ticket) % ring_.size();
  FlightEntry& e = ring_[slot];
  tickets_[slot] = ticket;
  e.backend.assign(backend.data(), backend.size());
  e.instance = instance;
  e.rank = rank;
  e.seq = seq;
  e.op.assign(op.data(), op.size());
  e.details.assign(details.data(), details.size());
  e.issued = now;
  e.started.reset();
  e.finished.reset();
  e.state = FlightEntry::State::kIssued;
  e.error.clear();
  return ticket;
}

FlightEntry* FlightRecorder::Find(int64_t ticket) {
  if (ticket < 0 || ring_.empty()) return nullptr;
  const size_t slot = static_cast<size_t>(ticket) % ring_.size();
  return tickets_[slot] == ticket ? &ring_[slot] : nullptr;
}

void FlightRecorder::Started(int64_t ticket) {
  if (ticket < 0) return;
  const absl::Time now = absl::Now();
  std::lock_guard<std::mutex> lock(mu_);
  if (FlightEntry* e = Find(ticket)) {
    e->started = now;
    e->state = FlightEntry::State::kStarted;
  }
}

void FlightRecorder::Finished(int64_t ticket, const absl::Status& status) {
  if (ticket < 0) return;
  const absl::Time now = absl::Now();
  std::lock_guard<std::mutex> lock(mu_);
  if (FlightEntry* e = Find(ticket)) {
    e->finished = now;
    e->state = status.ok() ? FlightEntry::State::kCompleted
                           : FlightEntry::State::kFailed;
    if (!status.ok()) e->error = std::string(status.message());
  }
}

std::vector<FlightEntry> FlightRecorder::Entries(int rank) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<FlightEntry> out;
  if (ring_.empty()) return out;
  const int64_t first = next_ticket_ > static_cast<int64_t>(ring_.size())
                            ? next_ticket_ - static_cast<int64_t>(ring_.size())
                            : 0;
  for (int64_t t = first; t < next_ticket_; ++t) {
    const FlightEntry& e = ring_[static_cast<size_t>(t) % ring_.size()];
    if (rank < 0 || e.rank == rank) out.push_back(e);
  }
  return out;
}

int64_t FlightRecorder::dropped() const {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t kept = static_cast<int64_t>(ring_.size());
  return next_ticket_ > kept ? next_ticket_ - kept : 0;
}

std::string FlightRecordJson(const FlightRecorder& recorder,
                             const FlightDumpInfo& info) {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  nlohmann::json entries = nlohmann::json::array();
  for (const FlightEntry& e : recorder.Entries(info.entries_of)) {
    entries.push_back({{"backend", e.backend},
                       {"instance", e.instance},
                       {"rank", e.rank},
                       {"seq", e.seq},
                       {"op", e.op},
                       {"details", e.details},
                       {"issued", Seconds(e.issued)},
                       {"started", Seconds(e.started)},
                       {"finished", Seconds(e.finished)},
                       {"state", StateName(e.state)},
                       {"error", e.error}});
  }
  nlohmann::json dump = {
      {"format", "dtrain.flight_recorder.v1"},
      {"rank", info.rank},
      {"world_size", info.world_size},
      {"pid", static_cast<int64_t>(::getpid())},
      {"host", host},
      {"reason", info.reason},
      {"dumped_at", absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch())},
      {"capacity", recorder.capacity()},
      {"dropped", recorder.dropped()},
      {"entries", std::move(entries)}};
  return dump.dump(1);
}

absl::Status DumpFlightRecord(const FlightRecorder& recorder,
                              const FlightDumpInfo& info,
                              const std::string& path) {
  return base::WriteFileAtomically(path, FlightRecordJson(recorder, info));
}

}  // namespace dtrain::backend
