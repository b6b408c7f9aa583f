// The host drivers' ranks as real processes of this host (shm_allreduce_
// bandwidth): forked before the caller touches LibTorch or starts a thread,
// meeting through a TCP store on loopback port 0 that the driver serves and
// whose port reaches them through pipes.
#ifndef DTRAIN_BENCH_FORKED_RANKS_H_
#define DTRAIN_BENCH_FORKED_RANKS_H_

#include <functional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace dtrain::bench {

// What a forked rank runs: its rank and the store's port. A failure is
// printed as "<name>: [rank R] <status>" and fails the run.
using RankMain = std::function<absl::Status(int rank, int store_port)>;

// Forks `processes` ranks running `rank_main`, serves their store (with
// `timeout`) and waits for them. A rank dies with the driver; once one
// fails, the others get a few seconds to notice and say why, then are
// killed. Returns 0 when every rank succeeded, 1 otherwise (the reason on
// stderr). Call it from a single-threaded process: a child of a
// multi-threaded one may find a lock held forever by a thread that did not
// come along.
int RunForkedRanks(absl::string_view name, int processes,
                   absl::Duration timeout, const RankMain& rank_main);

}  // namespace dtrain::bench

#endif  // DTRAIN_BENCH_FORKED_RANKS_H_
