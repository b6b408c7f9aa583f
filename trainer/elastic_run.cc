#include "trainer/elastic_run.h"

#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/atomic_file.h"
#include "base/pause_watch.h"
#include "base/status_macros.h"
#include "dist/rendezvous/next_generation.h"
#include "dist/store/failover_store.h"
#include "dist/store/prefix_store.h"
#include "dist/store/tcp_store.h"
#include "trainer/elastic_handover.h"
#include "trainer/elastic_state.h"

namespace dtrain::trainer {
namespace {

// Where the first generation publishes every rank's standby, for joiners.
constexpr char kEndpointsKey[] = "elastic/endpoints";

// The standbys' list as the first generation writes it: "host:port ...".
absl::StatusOr<std::vector<store::StoreEndpoint>> ParseStandbys(
    absl::string_view text) {
  std::vector<store::StoreEndpoint> endpoints;
  for (absl::string_view part : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    DTRAIN_ASSIGN_OR_RETURN(store::StoreEndpoint e,
                            store::StoreEndpoint::Parse(part));
    endpoints.push_back(std::move(e));
  }
  if (endpoints.empty())
    return absl::InvalidArgumentError("an empty list of standby stores");
  return endpoints;
}
// How long the job's store may leave a call unanswered past its own wait
// before the survivors take it for stopped and fail over.
constexpr absl::Duration kUnresponsiveAfter = absl::Seconds(2);
// How often rank 0 looks for queued joiners while training.
constexpr absl::Duration kJoinPoll = absl::Milliseconds(100);

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

// While a generation trains, rank 0 looks for queued joiners and sets the
// flag the step's vote carries, so that every rank regroups at the same
// step. Stops (and joins its thread) when destroyed.
class JoinWatch {
 public:
  JoinWatch(store::Store& store, bool watch, int world_size, int max_ranks)
      : store_(store) {
    if (!watch || (max_ranks > 0 && world_size >= max_ranks)) return;
    thread_ = std::thread([this] { Loop(); });
  }
  ~JoinWatch() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  const std::atomic<bool>* flag() const { return &regroup_; }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(
        lock, std::chrono::microseconds(absl::ToInt64Microseconds(kJoinPoll)),
        [this] { return stop_; })) {
      lock.unlock();
      // A store error here is the training's to find: it fails the step.
      absl::StatusOr<int64_t> queued = rendezvous::QueuedJoiners(store_);
      lock.lock();
      if (queued.ok() && *queued > 0) regroup_ = true;
    }
  }

  store::Store& store_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::atomic<bool> regroup_{false};
  std::thread thread_;
};

// A rank of an elastic job across generations: its standby, the job's
// failover store, the generation it is in, and the loop that trains each.
class ElasticRank {
 public:
  ElasticRank(const TrainOptions& options, const TrainContext& context,
              const ElasticOptions& elastic)
      : options_(options), context_(context), elastic_(elastic) {
    failover_options_.client.token = elastic.token;
    failover_options_.client.timeout = options.launch.timeout;
    // A stopped rank's server is left within seconds, not after --timeout
    // (minutes) and more: a live server answers at once from its own thread.
    failover_options_.client.unresponsive_after = kUnresponsiveAfter;
  }
  ~ElasticRank() { FinishSharing(); }

  // A rank of the first generation: swaps standbys through `world`'s store.
  absl::Status StartFirst(const rendezvous::World& world) {
    who_ = absl::StrCat("[rank ", world.rank, "] elastic: ");
    DTRAIN_RETURN_IF_ERROR(StartStandby());
    absl::StatusOr<std::vector<store::StoreEndpoint>> endpoints =
        SwapEndpoints(*world.store, world.rank, world.world_size,
                      standby_->endpoint(), options_.launch.timeout);
    if (!endpoints.ok())
      return Fail("swapping standby stores: ", endpoints.status());
    std::vector<std::string> texts;
    for (int r = 0; r < world.world_size; ++r) {
      rendezvous::GenerationMember m;
      m.previous_rank = r;
      m.standby = (*endpoints)[r].ToString();
      members_.push_back(m);
      texts.push_back(m.standby);
    }
    // For joiners, which find the job through its first store, and for a
    // launcher's replacements, through a file of the launcher's on each host.
    if (world.rank == 0) {
      DTRAIN_RETURN_IF_ERROR(
          world.store->Set(kEndpointsKey, absl::StrJoin(texts, " ")));
    }
    if (world.local_rank == 0 && !elastic_.addresses_dir.empty()) {
      if (absl::Status s = base::WriteFileAtomically(
              StandbysFile(elastic_.addresses_dir), absl::StrJoin(texts, " "));
          !s.ok()) {
        return Fail("writing the standby stores for replacements: ", s);
      }
    }
    return OpenFailover(*std::move(endpoints));
  }

  // A joiner: finds the job's standbys through its first store at
  // `first_store`, queues, and waits to be admitted.
  absl::Status StartJoined(const store::StoreEndpoint& first_store) {
    who_ = absl::StrCat("[joiner pid ", ::getpid(), "] elastic: ");
    store::TcpStoreOptions o = failover_options_.client;
    o.host = first_store.host;
    o.port = first_store.port;
    o.connect_timeout = options_.launch.timeout;
    absl::StatusOr<std::shared_ptr<store::TcpStore>> first =
        store::TcpStore::Create(o);
    if (!first.ok())
      return Fail("reaching the job's first store: ", first.status());
    store::PrefixStore job(rendezvous::kJobStorePrefix, *first);
    absl::StatusOr<std::string> text =
        job.Get(kEndpointsKey, options_.launch.timeout);
    if (!text.ok()) return Fail("reading the job's standbys: ", text.status());
    absl::StatusOr<std::vector<store::StoreEndpoint>> endpoints =
        ParseStandbys(*text);
    if (!endpoints.ok()) return Fail("", endpoints.status());
    return StartJoinedThrough(*std::move(endpoints));
  }

  // A joiner that knows the job's standbys (the first generation's): the
  // lowest that answers is the job's store.
  absl::Status StartJoinedThrough(std::vector<store::StoreEndpoint> endpoints) {
    who_ = absl::StrCat("[joiner pid ", ::getpid(), "] elastic: ");
    DTRAIN_RETURN_IF_ERROR(StartStandby());
    DTRAIN_RETURN_IF_ERROR(OpenFailover(std::move(endpoints)));
    const absl::Time queued_at = absl::Now();
    rendezvous::GenerationMember self = Self(-1);
    absl::StatusOr<rendezvous::Generation> g = rendezvous::JoinNextGeneration(
        *failover_, self, options_.launch.timeout);
    if (!g.ok()) return Fail("", g.status());
    DTRAIN_RETURN_IF_ERROR(Enter(*g));
    generation_ = g->generation;
    who_ = absl::StrCat("[rank ", current_.rank, "] elastic: ");
    Log(absl::StrCat("joined generation ", g->generation, " as rank ",
                     current_.rank, " of ", current_.world_size,
                     ", going on from step ", g->committed_step, ", ",
                     Since(queued_at), " after it queued"));
    if (context_.log != nullptr) {
      handover_.first_step_committed = [this, queued_at](int64_t step) {
        Log(absl::StrCat("trained step ", step, ", its first, ",
                         Since(queued_at), " after it queued to join"));
      };
    }
    return absl::OkStatus();
  }

  // Trains generation after generation, from `world` and `backend` (the
  // first generation's; null for a joiner, whose generation Enter made).
  absl::StatusOr<TrainResult> Run(const rendezvous::World* world,
                                  backend::Backend* backend) {
    int generation = generation_;
    if (world != nullptr) current_ = *world;
    if (backend != nullptr) running_ = backend;
    std::atomic<bool> no_stop{false};
    TrainContext generation_context = context_;
    generation_context.elastic = &handover_;
    // The regroup question rides on the stop vote, which needs a flag.
    if (generation_context.stop_requested == nullptr)
      generation_context.stop_requested = &no_stop;
    for (;; ++generation) {
      absl::StatusOr<TrainResult> result;
      {
        JoinWatch watch(*failover_, current_.rank == 0, current_.world_size,
                        elastic_.max_ranks);
        handover_.regroup_requested = watch.flag();
        pause_watch_.Reset();
        result = Train(options_, current_, *running_, generation_context);
        handover_.regroup_requested = nullptr;
        // A run that failed before it took the state.
        FinishSharing();
      }
      if (result.ok()) return result;
      const bool regroup = handover_.regrouped;
      if (!regroup && !PeerFailure(result.status())) return result;
      const absl::Time failed_at = absl::Now();
      running_->Abort(result.status());
      if (!regroup) DTRAIN_RETURN_IF_ERROR(CheckNotLeftBehind(generation));
      Log(absl::StrCat(
          "generation ", generation, " of ", current_.world_size,
          regroup ? " ranks stopped to admit joiners (" : " ranks failed (",
          result.status().message(), "); forming generation ", generation + 1));
      DTRAIN_ASSIGN_OR_RETURN(rendezvous::Generation formed,
                              Form(generation + 1));
      DTRAIN_RETURN_IF_ERROR(Enter(formed));
      int joined = 0;
      for (const rendezvous::GenerationMember& m : formed.members)
        joined += m.joiner() ? 1 : 0;
      Log(absl::StrCat(
          "generation ", generation + 1, ": rank ", current_.rank, " of ",
          current_.world_size, ", going on from step ", formed.committed_step,
          joined > 0
              ? absl::StrCat(" (", joined, joined == 1 ? " joiner" : " joiners",
                             "; the batch per rank is kept, the "
                             "learning rate unchanged)")
              : ""));
      if (context_.log != nullptr) {
        handover_.first_step_committed = [this, failed_at,
                                          g = generation + 1](int64_t step) {
          Log(absl::StrCat("generation ", g, " trained step ", step,
                           ", its first, ", Since(failed_at),
                           " after generation ", g - 1, " ended here"));
        };
      }
    }
  }

 private:
  absl::Status Fail(absl::string_view doing, const absl::Status& s) const {
    return absl::Status(s.code(), absl::StrCat(who_, doing, s.message()));
  }
  void Log(const std::string& line) const {
    if (context_.log != nullptr) *context_.log << who_ << line << "\n";
  }
  static std::string Duration(absl::Duration d) {
    return absl::FormatDuration(absl::Trunc(d, absl::Milliseconds(1)));
  }
  static std::string Since(absl::Time t) { return Duration(absl::Now() - t); }

  // Waits for the transfer of the state that Enter started, if any.
  void FinishSharing() {
    if (sharing_.joinable()) sharing_.join();
  }

  void LogShare(const StateShare& share, int64_t step) const {
    if (share.role == StateShare::Role::kKept) return;
    const std::string what = absl::StrCat(
        "the state of step ", step, " (",
        absl::StrFormat("%.1f", static_cast<double>(share.bytes) / 1e6),
        " MB)");
    if (share.role == StateShare::Role::kReceived) {
      Log(absl::StrCat("received ", what, " from rank ", share.source, " in ",
                       Duration(share.took)));
    } else {
      Log(absl::StrCat("sent ", what, " to ",
                       share.receivers.size() == 1 ? "rank " : "ranks ",
                       absl::StrJoin(share.receivers, ", "), " in ",
                       Duration(share.took)));
    }
  }

  absl::Status StartStandby() {
    absl::StatusOr<std::unique_ptr<store::StoreStandby>> standby =
        store::StoreStandby::Start({elastic_.standby_host, elastic_.token});
    if (!standby.ok())
      return Fail("starting the standby store: ", standby.status());
    standby_ = *std::move(standby);
    return absl::OkStatus();
  }

  absl::Status OpenFailover(std::vector<store::StoreEndpoint> endpoints) {
    absl::StatusOr<std::shared_ptr<store::FailoverStore>> failover =
        store::FailoverStore::Create(std::move(endpoints), failover_options_);
    if (!failover.ok()) return Fail("", failover.status());
    failover_ = *std::move(failover);
    return absl::OkStatus();
  }

  rendezvous::GenerationMember Self(int previous_rank) const {
    rendezvous::GenerationMember self;
    self.previous_rank = previous_rank;
    self.committed_step = handover_.committed_step;
    self.pid = ::getpid();
    self.host = HostName();
    self.standby = standby_->endpoint().ToString();
    return self;
  }

  // After generation `generation` failed: when this process did not run for
  // longer than the others wait for a peer (stopped, starved), they may have
  // left it out and gone on, even to the end of the run, on a store it does
  // not use (its own standby, when it was rank 0, holds only what it knew).
  // It goes on only with another member alive and no newer generation on
  // that member's store; left out otherwise (kFailedPrecondition), rather
  // than forming a generation of its own from its stale view.
  absl::Status CheckNotLeftBehind(int generation) const {
    const absl::Duration paused = pause_watch_.LongestPause();
    const absl::Duration timeout = options_.launch.timeout;
    if (paused < timeout) return absl::OkStatus();
    // "was left out of generation N", as FormNextGeneration says it.
    const std::string left_out = absl::StrCat(
        "rank ", current_.rank, " was left out of generation ", generation + 1,
        ": this process did not run for ", Duration(paused),
        " (stopped or starved), past the ", absl::FormatDuration(timeout),
        " timeout after which the others go on without a rank, and ");
    std::vector<std::string> absent;
    bool alive = false;
    for (size_t r = 0; r < members_.size(); ++r) {
      if (static_cast<int>(r) == current_.rank) continue;
      std::string why;
      absl::StatusOr<store::StoreEndpoint> e =
          store::StoreEndpoint::Parse(members_[r].standby);
      if (!e.ok() || store::ProbeEndpoint(*e, failover_options_, &why) !=
                         store::EndpointState::kServing) {
        absent.push_back(absl::StrCat("rank ", r, ": ", why));
        continue;
      }
      store::TcpStoreOptions o = failover_options_.client;
      o.host = e->host;
      o.port = e->port;
      absl::StatusOr<std::shared_ptr<store::TcpStore>> peer =
          store::TcpStore::Create(o);
      if (!peer.ok()) {
        absent.push_back(
            absl::StrCat("rank ", r, ": ", peer.status().message()));
        continue;
      }
      alive = true;
      absl::StatusOr<int> latest = rendezvous::LatestGeneration(**peer);
      if (latest.ok() && *latest > generation) {
        return absl::FailedPreconditionError(absl::StrCat(
            who_, left_out, "the others formed generation ", *latest,
            " without it (rank ", r, "'s store says so)"));
      }
    }
    if (alive) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(
        who_, left_out, "no other rank of generation ", generation,
        " answers (", absl::StrJoin(absent, "; "),
        "): they went on without it, and may have finished; it does not go on "
        "alone"));
  }

  // The next generation, through the lowest standby that answers; queued
  // joiners are admitted into it.
  absl::StatusOr<rendezvous::Generation> Form(int generation) {
    rendezvous::NextGenerationOptions next;
    next.generation = generation;
    next.previous_world_size = current_.world_size;
    next.self = Self(current_.rank);
    next.min_ranks = elastic_.min_ranks;
    next.max_ranks = elastic_.max_ranks;
    next.admit_joiners = true;
    next.stopped_grace = elastic_.stopped_grace;
    // A stopped rank is waited for the grace, on top of the time a live
    // one may take to register.
    next.timeout = options_.launch.timeout + elastic_.stopped_grace;
    const std::vector<rendezvous::GenerationMember> previous = members_;
    next.probe = [&](int r) {
      absl::StatusOr<store::StoreEndpoint> e =
          store::StoreEndpoint::Parse(previous[r].standby);
      if (!e.ok()) return rendezvous::PeerState::kGone;
      switch (store::ProbeEndpoint(*e, failover_options_)) {
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
        rendezvous::FormNextGeneration(*failover_, next);
    if (absl::IsUnavailable(formed.status())) {
      // The store's process is gone: the lowest standby that answers.
      if (absl::Status s = failover_->Failover().status(); !s.ok())
        return Fail("", s);
      formed = rendezvous::FormNextGeneration(*failover_, next);
    }
    if (!formed.ok()) return Fail("", formed.status());
    if (absl::Status s = rendezvous::AdmitJoiners(*failover_, *formed);
        !s.ok()) {
      return Fail("admitting joiners: ", s);
    }
    return formed;
  }

  // Becomes rank `g.rank` of generation `g`: its backend, and the state it
  // starts from (its own at the committed step, or a member's, which arrives
  // while Train builds the model).
  absl::Status Enter(const rendezvous::Generation& g) {
    members_ = g.members;
    // The old backend goes before the new one is made: its threads and
    // connections are of no more use.
    owned_.reset();
    current_.rank = g.rank;
    current_.world_size = g.world_size;
    current_.store = std::make_shared<store::PrefixStore>(
        absl::StrCat("elastic/gen/", g.generation, "/world"), failover_);
    absl::StatusOr<std::unique_ptr<backend::Backend>> made =
        backend::CreateBackend(current_.membership(options_.launch.timeout),
                               elastic_.backend);
    if (!made.ok()) return Fail("creating the backend: ", made.status());
    owned_ = *std::move(made);
    running_ = owned_.get();
    // The state moves while the run builds its model (await_start_bytes).
    FinishSharing();
    sharing_bytes_ = std::move(handover_.committed_bytes);
    sharing_ = std::thread(
        [this, g,
         state_store = std::make_shared<store::PrefixStore>(
             absl::StrCat("elastic/gen/", g.generation, "/state"), failover_)] {
          sharing_result_ =
              ShareCommittedState(g, state_store, elastic_.backend,
                                  options_.launch.timeout, &sharing_bytes_);
        });
    absl::optional<TrainingData> data = std::move(handover_.data);
    handover_ = ElasticHandover();
    handover_.data = std::move(data);
    handover_.start_from_memory = true;
    handover_.await_start_bytes =
        [this, step = g.committed_step]() -> absl::StatusOr<std::string> {
      FinishSharing();
      if (!sharing_result_.ok()) return sharing_result_.status();
      LogShare(*sharing_result_, step);
      return std::move(sharing_bytes_);
    };
    return absl::OkStatus();
  }

  const TrainOptions& options_;
  const TrainContext& context_;
  const ElasticOptions& elastic_;
  store::FailoverStoreOptions failover_options_;
  std::string who_;
  std::unique_ptr<store::StoreStandby> standby_;
  std::shared_ptr<store::FailoverStore> failover_;
  // The generation this rank is in: its world, its members (with their
  // standbys, for the next generation's probes), its backend.
  rendezvous::World current_;
  std::vector<rendezvous::GenerationMember> members_;
  std::unique_ptr<backend::Backend> owned_;
  backend::Backend* running_ = nullptr;
  ElasticHandover handover_;
  // Whether this process ran all along while a generation trained.
  base::PauseWatch pause_watch_;
  // The transfer of the state a generation starts from, which runs while the
  // generation builds its model: its thread, result and bytes.
  std::thread sharing_;
  absl::StatusOr<StateShare> sharing_result_;
  std::string sharing_bytes_;
  // The generation Run starts with.
  int generation_ = 0;
};

}  // namespace

std::string StandbysFile(const std::string& addresses_dir) {
  return absl::StrCat(addresses_dir, "/standbys");
}

absl::StatusOr<std::vector<store::StoreEndpoint>> ReadStandbys(
    const std::string& addresses_dir) {
  const std::string path = StandbysFile(addresses_dir);
  DTRAIN_ASSIGN_OR_RETURN(
      std::string text,
      base::ReadFile(path, {"the job's standby stores", 64 << 10}));
  absl::StatusOr<std::vector<store::StoreEndpoint>> endpoints =
      ParseStandbys(absl::StripAsciiWhitespace(text));
  if (!endpoints.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", endpoints.status().message()));
  }
  return endpoints;
}

absl::StatusOr<TrainResult> TrainElastic(const TrainOptions& options,
                                         const rendezvous::World& world,
                                         backend::Backend& backend,
                                         const TrainContext& context,
                                         const ElasticOptions& elastic) {
  ElasticRank rank(options, context, elastic);
  DTRAIN_RETURN_IF_ERROR(rank.StartFirst(world));
  return rank.Run(&world, &backend);
}

absl::StatusOr<TrainResult> JoinElastic(const TrainOptions& options,
                                        const store::StoreEndpoint& first_store,
                                        const TrainContext& context,
                                        const ElasticOptions& elastic) {
  ElasticRank rank(options, context, elastic);
  DTRAIN_RETURN_IF_ERROR(rank.StartJoined(first_store));
  return rank.Run(nullptr, nullptr);
}

absl::StatusOr<TrainResult> JoinElasticThroughStandbys(
    const TrainOptions& options, std::vector<store::StoreEndpoint> standbys,
    const TrainContext& context, const ElasticOptions& elastic) {
  ElasticRank rank(options, context, elastic);
  DTRAIN_RETURN_IF_ERROR(rank.StartJoinedThrough(std::move(standbys)));
  return rank.Run(nullptr, nullptr);
}

}  // namespace dtrain::trainer
