// An elastic training run: Train in generations of ranks, going on in the
// same processes when a rank dies or stalls (docs/RELIABILITY.md, "Elastic
// training"). Each rank serves a standby store from the start, and the ranks
// swap their addresses in the first generation's store. When Train fails
// because of a peer (a backend error: unavailable, timed out or aborted), the
// survivors abort their backend, agree on the next generation through the
// lowest standby that answers (FormNextGeneration, probing each missing
// rank's standby), create a backend for it, and train on from the highest
// committed step. The members at that step start from their own state; the
// others receive it from a member that holds it (trainer/elastic_state.h),
// while they build their model (trainer/elastic_handover.h). A failure of this
// rank's own (bad data, a signal's stop) ends the run as without elasticity.
//
// Grow: a process started with JoinElastic queues in the job's store; rank 0
// looks for queued joiners between steps, the step's vote carries the
// question to every rank, and all stop after the same committed step to form
// a generation that admits them (up to max_ranks); each joiner receives the
// state from a member at its address, else from rank 0. The batch per rank is
// kept (the global batch grows), the learning rate is left as configured.
//
// Collective as Train: every rank of the first generation calls TrainElastic
// with the same options. Uses the process's LibTorch settings as Train does.
#ifndef DTRAIN_TRAINER_ELASTIC_RUN_H_
#define DTRAIN_TRAINER_ELASTIC_RUN_H_

#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dist/backend/backend.h"
#include "dist/backend/factory.h"
#include "dist/rendezvous/init.h"
#include "dist/store/failover_store.h"
#include "trainer/train_options.h"
#include "trainer/trainer.h"

namespace dtrain::trainer {

struct ElasticOptions {
  // Fewer ranks than this end the run, on every rank, with the reason.
  int min_ranks = 1;
  // Joiners are admitted up to this many ranks (the rest wait); 0: no bound.
  int max_ranks = 0;
  // How long a stopped rank (SIGSTOP, a hang) is waited for before the
  // others go on without it.
  absl::Duration stopped_grace = absl::Seconds(5);
  // This rank's address for its standby store, as the others reach it.
  std::string standby_host = "127.0.0.1";
  // The job's store token (DTRAIN_STORE_TOKEN), or empty.
  std::string token;
  // The backend each generation creates.
  backend::BackendConfig backend;
  // When set (a launcher's DTRAIN_ELASTIC_DIR): the first generation's ranks
  // of local rank 0 write the job's standby stores there (StandbysFile), for
  // replacements to join through (JoinElasticThroughStandbys).
  std::string addresses_dir;
};

// The file in `addresses_dir` that lists the first generation's standby
// stores, "host:port" separated by spaces, in rank order.
std::string StandbysFile(const std::string& addresses_dir);

// The list StandbysFile holds; kNotFound when the job has not written it (it
// has not formed its first generation), kInvalidArgument for garbage.
absl::StatusOr<std::vector<store::StoreEndpoint>> ReadStandbys(
    const std::string& addresses_dir);

// Train over generations, starting with `world` and `backend` (the first
// generation's, which the caller keeps alive until this returns). Returns the
// last generation's result, or the error that ended the run: this rank's own,
// FormNextGeneration's (fewer than min_ranks, left out), or a backend's.
// Writes one line to context.log at each new generation.
absl::StatusOr<TrainResult> TrainElastic(const TrainOptions& options,
                                         const rendezvous::World& world,
                                         backend::Backend& backend,
                                         const TrainContext& context,
                                         const ElasticOptions& elastic);

// Joins the running elastic job whose first store (its rank 0's, the
// --dist_url of its ranks) is at `first_store`: queues in the job's store and
// waits until the ranks admit it at a step boundary (up to their max_ranks,
// within options.launch.timeout), becomes the last rank of the new
// generation, receives a member's state over a backend (parameters,
// optimizer state, sampler position), and trains on with the others as
// TrainElastic does. The job's first store must still answer (its rank 0
// alive).
absl::StatusOr<TrainResult> JoinElastic(const TrainOptions& options,
                                        const store::StoreEndpoint& first_store,
                                        const TrainContext& context,
                                        const ElasticOptions& elastic);

// As JoinElastic, finding the job through the first generation's standby
// stores (ReadStandbys): the job's store is the lowest that answers, so the
// job's rank 0 may be dead. How a launcher's replacement joins.
absl::StatusOr<TrainResult> JoinElasticThroughStandbys(
    const TrainOptions& options, std::vector<store::StoreEndpoint> standbys,
    const TrainContext& context, const ElasticOptions& elastic);

}  // namespace dtrain::trainer

#endif  // DTRAIN_TRAINER_ELASTIC_RUN_H_
