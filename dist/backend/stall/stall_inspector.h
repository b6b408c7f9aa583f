// Stall inspection: which ranks have not reached a collective that waits, and
// what they last did, while the job still runs (as Horovod's stall inspector
// and PyTorch's NCCL desync report do).
//
// Every rank records each collective it issues (a sequence number counted
// the same way on every rank, the operation and its label) in memory: the
// hot path takes a mutex and a clock read, nothing else. A thread of its own
// publishes the newest record to the store four times a second, off the hot
// path, so that a rank that is stopped or stuck has left its last state
// behind. When a collective has waited `warn_after`, the thread reads the
// other ranks' records and warns, naming each rank that has not issued it:
//
//   [rank 0] collective #667 (allreduce, bucket 0) has waited 10s: rank 1 has
//   not joined collective #667 (allreduce, bucket 0): last seen at collective
//   #666 (allreduce, stop vote), 10.3s ago
//
// and Report() gives the same words for the error when the collective times
// out. Records live under "stall/<rank>" in the store given.
//
// A rank whose process has exited has not stalled: it is gone, and that is
// the news. Each rank also publishes its process id and host key
// (hierarchical::LocalHostKey(): boot id and PID namespace) once; a peer on
// this host whose process no longer runs is named instead ("rank 0 (pid 4242)
// has exited", the words the shm backend uses), once per inspector in the
// warnings, and the reports stop there (rank 0 hosts the store: when it is
// gone the store is too). A peer on this host that is stopped (SIGSTOP, a
// tracer) is named as stopped, with its last record, whether or not it has
// issued the collective: stopped in the middle of one, it holds the others up
// just the same. Peers on other hosts cannot be checked from here (their
// launcher names them), so "held up in the transport, not by a rank" is said
// only when every peer runs on this host and is running.
//
// Thread safety: every method may be called from any thread. Lifetimes: the
// store must outlive the inspector; the destructor stops the thread, waiting
// at most about a second for a store call in progress (a thread stuck on a
// store that no longer answers is left to finish on its own, holding only
// what it shares with the inspector).
#ifndef DTRAIN_DIST_BACKEND_STALL_STALL_INSPECTOR_H_
#define DTRAIN_DIST_BACKEND_STALL_STALL_INSPECTOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "dist/backend/backend.h"
#include "dist/store/store.h"

namespace dtrain::backend {

struct StallInspectorOptions {
  int rank = 0;
  int size = 1;
  // The rendezvous store, shared by every rank.
  std::shared_ptr<store::Store> store;
  // A collective waiting this long gets a warning (once).
  absl::Duration warn_after = absl::Minutes(1);
  // How often this rank's newest record goes to the store (if it changed).
  absl::Duration publish_every = absl::Milliseconds(250);
  // How long reading the other ranks' records may take in all.
  absl::Duration read_budget = absl::Seconds(2);
  // Where warnings go (one line each, without a newline); stderr if unset.
  std::function<void(const std::string&)> warn;
  // This process as the other ranks see it, and how to tell whether a peer's
  // process still runs or is stopped. Zero, empty and unset: getpid(),
  // LocalHostKey(), base::ProcessRunning and base::ProcessStopped. Tests with
  // ranks as threads set them.
  int64_t pid = 0;
  std::string host_key;
  std::function<bool(int64_t)> alive;
  std::function<bool(int64_t)> stopped;
};

class StallInspector {
 public:
  explicit StallInspector(StallInspectorOptions options);
  ~StallInspector();
  StallInspector(const StallInspector&) = delete;
  StallInspector& operator=(const StallInspector&) = delete;

  // Records a collective just issued (`op`: "allreduce", ...; `label`: the
  // caller's, e.g. "bucket 3") with its Work, and returns its sequence number
  // (1, 2, ...). Issue order must be the same on every rank (backend.h). The
  // inspector holds `work` until it completes; it must not hold the
  // inspector (a cycle).
  int64_t Issued(absl::string_view op, absl::string_view label,
                 std::shared_ptr<Work> work);

  // For collective `seq`: each rank that has not issued it, with its last
  // record ("rank 1 has not joined collective #667 (allreduce, bucket 0): last
  // seen at collective #666 (allreduce, stop vote), 20.3s ago"), each peer on
  // this host that is stopped ("rank 1 (pid 4242) is stopped (SIGSTOP or a
  // tracer): last seen at ..."), or that every rank has issued it; reads the
  // store, within the read budget. A rank's record is at
  // most `publish_every` older than what it last did.
  std::string Report(int64_t seq);

  // What to append to the error of collective `seq` (`error` is its message):
  // "; rank 0 (pid 4242) has exited" for peers on this host whose process has
  // exited and that `error` does not name already ("" when it does), else
  // " [stall report: <Report(seq)>]". Reads the store within the read budget.
  std::string Explain(int64_t seq, absl::string_view error);

  // The peers on this host whose process has exited, in rank order, among
  // those identified so far (the inspector's thread reads the identities
  // soon after start); empty when none has or none can be checked. Never
  // reads the store, so it cannot be held up by one that stopped answering.
  struct ExitedPeer {
    int rank = 0;
    int64_t pid = 0;
    // "rank 0 (pid 4242) has exited".
    std::string ToString() const;
  };
  std::vector<ExitedPeer> ExitedPeers();

  struct State;  // Shared with the publishing thread.

 private:
  std::shared_ptr<State> state_;
};

}  // namespace dtrain::backend

#endif  // DTRAIN_DIST_BACKEND_STALL_STALL_INSPECTOR_H_
