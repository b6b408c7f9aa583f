// The flight recorder: every backend of this process notes each collective it
// issues (its backend, sequence number, operation and size), when it started
// and finished, and how it ended, in one ring of the last K. On a failure, a
// timeout or SIGUSR1, //trainer:train writes the ring to a file per rank, and
// tools/flight_analyze reads the ranks' files and names the first collective
// they disagree on: a rank that never issued it, or ranks that issued
// different operations or sizes under the same number.
//
// On by default: a collective costs a lock and a few short copies (56 ns
// alone, 175 ns with four threads noting at once; bench/
// flight_recorder_benchmark). DTRAIN_FLIGHT_RECORDER=N keeps the last N
// (default 2048); 0 turns it off.
//
// Thread-safe: backends on any threads note, one thread dumps.
#ifndef DTRAIN_DIST_BACKEND_FLIGHT_RECORDER_H_
#define DTRAIN_DIST_BACKEND_FLIGHT_RECORDER_H_

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/optional.h"

namespace dtrain::backend {

struct FlightEntry {
  enum class State { kIssued, kStarted, kCompleted, kFailed };

  // Which backend: its name ("gloo+shm") and the how-manieth of that name
  // this rank created (0 for the first): the ranks create their backends in
  // the same order, so equal keys name the same backend on every rank.
  std::string backend;
  int instance = 0;
  int rank = 0;
  int64_t seq = 0;      // The backend's own number, from 1.
  std::string op;       // "allreduce"
  std::string details;  // "sum, 4096 x float32 = 16 KiB, bucket 3"
  absl::Time issued;
  absl::optional<absl::Time> started;
  absl::optional<absl::Time> finished;
  State state = State::kIssued;
  std::string error;  // With kFailed.
};

class FlightRecorder {
 public:
  // Keeps the last `capacity` collectives; 0 keeps none (every call is a
  // no-op).
  explicit FlightRecorder(size_t capacity);

  // This process's, sized by DTRAIN_FLIGHT_RECORDER (an unparsable value
  // keeps the default, with a warning on stderr).
  static FlightRecorder& Process();

  // The instance number of the next backend named `backend` that `rank`
  // creates in this process (0, 1, ...).
  int NextInstance(absl::string_view backend, int rank);

  // Notes an issued collective; returns the ticket Started and Finished
  // take (-1 when nothing is kept).
  int64_t Issued(absl::string_view backend, int instance, int rank, int64_t seq,
                 absl::string_view op, absl::string_view details);
  // Ignored for a ticket of -1 or one the ring has since overwritten.
  void Started(int64_t ticket);
  void Finished(int64_t ticket, const absl::Status& status);

  // The entries of `rank` (every rank's for -1), oldest first.
  std::vector<FlightEntry> Entries(int rank = -1) const;
  size_t capacity() const { return ring_.size(); }
  // Collectives noted and since overwritten.
  int64_t dropped() const;

 private:
  FlightEntry* Find(int64_t ticket);

  mutable std::mutex mu_;
  std::vector<FlightEntry> ring_;
  std::vector<int64_t> tickets_;  // The ticket each slot holds; -1: empty.
  int64_t next_ticket_ = 0;
  std::vector<std::pair<std::pair<std::string, int>, int>> instances_;
};

// What a dump says of itself, and whose entries it holds.
struct FlightDumpInfo {
  // The process's rank (-1 where it has none yet: an elastic joiner) and its
  // job's ranks (0: not known), so that the analysis can name a rank that
  // left no dump.
  int rank = -1;
  int world_size = 0;
  // Only the entries of this rank (ranks as threads of one process); -1:
  // every entry (a process of its own, whose rank may have changed between
  // an elastic job's generations).
  int entries_of = -1;
  std::string reason;  // "failure: <the error>", "SIGUSR1"
};

// The dump: {"format": "dtrain.flight_recorder.v1", "rank", "world_size",
// "pid", "host",
// "reason", "dumped_at" (Unix seconds), "capacity", "dropped", "entries":
// [{"backend", "instance", "rank", "seq", "op", "details", "issued",
// "started", "finished" (Unix seconds; null when not yet), "state"
// ("issued", "started", "completed", "failed"), "error"}]}.
std::string FlightRecordJson(const FlightRecorder& recorder,
                             const FlightDumpInfo& info);

// Writes FlightRecordJson to `path` (replacing it whole: written aside, then
// renamed). Errors name the path.
absl::Status DumpFlightRecord(const FlightRecorder& recorder,
                              const FlightDumpInfo& info,
                              const std::string& path);

}  // namespace dtrain::backend

#endif  // DTRAIN_DIST_BACKEND_FLIGHT_RECORDER_H_
