#include "trainer/elastic_run.h"

#include <unistd.h>

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "dist/rendezvous/next_generation.h"
#include "dist/store/failover_store.h"
#include "dist/store/prefix_store.h"
#include "trainer/elastic_handover.h"

namespace dtrain::trainer {
namespace {

// A failure that a new generation can go on from: a peer died, stalled or
// gave up. Anything else (data, options, a signal's stop) is this rank's own.
bool PeerFailure(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) ||
         absl::IsAborted(s);
}

std::string HostName() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "?";
  return name;
}

// Every rank's standby endpoint, in rank order, through the first
// generation's store.
absl::StatusOr<std::vector<store::StoreEndpoint>> SwapEndpoints(
    store::Store& s, int rank, int world_size, const store::StoreEndpoint& mine,
    absl::Duration timeout) {
  DTRAIN_RETURN_IF_ERROR(
      s.Set(absl::StrCat("elastic/standby/", rank), mine.ToString()));
  std::vector<store::StoreEndpoint> out;
  for (int r = 0; r < world_size; ++r) {
    DTRAIN_ASSIGN_OR_RETURN(
        std::string text, s.Get(absl::StrCat("elastic/standby/", r), timeout));
    DTRAIN_ASSIGN_OR_RETURN(store::StoreEndpoint e,
                            store::StoreEndpoint::Parse(text));
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace

absl::StatusOr<TrainResult> TrainElastic(const TrainOptions& options,
                                         const rendezvous::World& world,
                                         backend::Backend& backend,
                                         const TrainContext& context,
                                         const ElasticOptions& elastic) {
  const std::string who = absl::StrCat("[rank ", world.rank, "] elastic: ");
  auto fail = [&](absl::string_view doing, const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat(who, doing, s.message()));
  };
  absl::StatusOr<std::unique_ptr<store::StoreStandby>> standby =
      store::StoreStandby::Start({elastic.standby_host, elastic.token});
  if (!standby.ok())
    return fail("starting the standby store: ", standby.status());
  absl::StatusOr<std::vector<store::StoreEndpoint>> endpoints =
      SwapEndpoints(*world.store, world.rank, world.world_size,
                    (*standby)->endpoint(), options.launch.timeout);
  if (!endpoints.ok())
    return fail("swapping standby stores: ", endpoints.status());
  store::FailoverStoreOptions failover_options;
  failover_options.client.token = elastic.token;
  failover_options.client.timeout = options.launch.timeout;
  absl::StatusOr<std::shared_ptr<store::FailoverStore>> failover =
      store::FailoverStore::Create(*endpoints, failover_options);
  if (!failover.ok()) return fail("", failover.status());

  rendezvous::World current = world;
  backend::Backend* running = &backend;
  std::unique_ptr<backend::Backend> owned;
  // original[r]: the first generation's rank of this generation's rank r.
  std::vector<int> original(world.world_size);
  for (int r = 0; r < world.world_size; ++r) original[r] = r;
  ElasticHandover handover;
  TrainContext generation_context = context;
  generation_context.elastic = &handover;
  for (int generation = 0;; ++generation) {
    absl::StatusOr<TrainResult> result =
        Train(options, current, *running, generation_context);
    if (result.ok() || !PeerFailure(result.status())) return result;
    const absl::Time failed_at = absl::Now();
    running->Abort(result.status());
    if (context.log != nullptr) {
      *context.log << who << "generation " << generation << " of "
                   << current.world_size << " ranks failed ("
                   << result.status().message() << "); forming generation "
                   << generation + 1 << "\n";
    }
    rendezvous::NextGenerationOptions next;
    next.generation = generation + 1;
    next.previous_world_size = current.world_size;
    next.self.previous_rank = current.rank;
    next.self.committed_step = handover.committed_step;
    next.self.pid = ::getpid();
    next.self.host = HostName();
    next.min_ranks = elastic.min_ranks;
    next.stopped_grace = elastic.stopped_grace;
    // A stopped rank is waited for the grace, on top of the time a live
    // one may take to register.
    next.timeout = options.launch.timeout + elastic.stopped_grace;
    next.probe = [&](int r) {
      switch (
          store::ProbeEndpoint((*endpoints)[original[r]], failover_options)) {
        case store::EndpointState::kServing:
          return rendezvous::PeerState::kAlive;
        case store::EndpointState::kGone:
          return rendezvous::PeerState::kGone;
        case store::EndpointState::kSilent:
          return rendezvous::PeerState::kStopped;
      }
      return rendezvous::PeerState::kGone;
    };
    absl::StatusOr<rendezvous::Generation> formed =
        rendezvous::FormNextGeneration(**failover, next);
    if (absl::IsUnavailable(formed.status())) {
      // The store's process is gone: the lowest standby that answers.
      if (absl::Status s = (*failover)->Failover().status(); !s.ok())
        return fail("", s);
      formed = rendezvous::FormNextGeneration(**failover, next);
    }
    if (!formed.ok()) return fail("", formed.status());
    std::vector<int> next_original;
    for (const rendezvous::GenerationMember& m : formed->members)
      next_original.push_back(original[m.previous_rank]);
    original = std::move(next_original);

    // The old backend goes before the new one is made: its threads and
    // connections are of no more use.
    owned.reset();
    current.rank = formed->rank;
    current.world_size = formed->world_size;
    current.store = std::make_shared<store::PrefixStore>(
        absl::StrCat("elastic/gen/", generation + 1, "/world"), *failover);
    absl::StatusOr<std::unique_ptr<backend::Backend>> made =
        backend::CreateBackend(current.membership(options.launch.timeout),
                               elastic.backend);
    if (!made.ok()) return fail("creating the backend: ", made.status());
    owned = *std::move(made);
    running = owned.get();
    // The new rank 0 is at the highest committed step: its state is every
    // rank's start.
    std::string start = std::move(handover.committed_bytes);
    absl::optional<TrainingData> data = std::move(handover.data);
    handover = ElasticHandover();
    handover.data = std::move(data);
    handover.start_from_memory = true;
    if (current.rank == 0) handover.start_bytes = std::move(start);
    if (context.log != nullptr) {
      handover.first_step_committed = [&context, who, failed_at,
                                       g = generation + 1](int64_t step) {
        *context.log << who << "generation " << g << " trained step " << step
                     << ", its first, "
                     << absl::FormatDuration(absl::Trunc(
                            absl::Now() - failed_at, absl::Milliseconds(1)))
                     << " after generation " << g - 1 << " failed here\n";
      };
    }
    if (context.log != nullptr) {
      *context.log << who << "generation " << generation + 1 << ": rank "
                   << current.rank << " of " << current.world_size
                   << ", going on from step " << formed->committed_step << "\n";
    }
  }
}

}  // namespace dtrain::trainer
