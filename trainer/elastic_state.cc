#include "trainer/elastic_state.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "dist/backend/backend.h"
#include "dist/backend/membership.h"
#include "dist/backend/small_collectives.h"
#include "dist/store/failover_store.h"
#include "dist/store/prefix_store.h"

namespace dtrain::trainer {

namespace {

// The address of a member's standby store: where it is on the network.
std::string Address(const rendezvous::GenerationMember& m) {
  absl::StatusOr<store::StoreEndpoint> e =
      store::StoreEndpoint::Parse(m.standby);
  return e.ok() ? e->host : std::string();
}

}  // namespace

std::vector<int> StateSources(const rendezvous::Generation& generation) {
  const std::vector<rendezvous::GenerationMember>& members = generation.members;
  auto holds = [&](const rendezvous::GenerationMember& m) {
    return !m.joiner() && m.committed_step >= generation.committed_step;
  };
  std::vector<int> source(members.size(), -1);
  for (size_t r = 1; r < members.size(); ++r) {
    if (holds(members[r])) continue;
    source[r] = 0;
    const std::string here = Address(members[r]);
    if (here.empty()) continue;
    for (size_t s = 0; s < members.size(); ++s) {
      if (holds(members[s]) && Address(members[s]) == here) {
        source[r] = static_cast<int>(s);
        break;
      }
    }
  }
  return source;
}

absl::StatusOr<StateShare> ShareCommittedState(
    const rendezvous::Generation& generation,
    std::shared_ptr<store::Store> store, const backend::BackendConfig& config,
    absl::Duration timeout, std::string* bytes) {
  StateShare share;
  const std::vector<int> sources = StateSources(generation);
  const int me = generation.rank;
  // This rank's group: its source first, then the source's receivers.
  const int root = sources[me] >= 0 ? sources[me] : me;
  std::vector<int> group = {root};
  for (size_t r = 0; r < sources.size(); ++r) {
    if (sources[r] == root) group.push_back(static_cast<int>(r));
  }
  if (group.size() == 1) return share;
  const std::string who = absl::StrCat("[rank ", me, "] elastic state: ");
  const absl::Time started = absl::Now();
  backend::Membership m;
  m.rank = static_cast<int>(std::find(group.begin(), group.end(), me) -
                            group.begin());
  m.world_size = static_cast<int>(group.size());
  m.store = std::make_shared<store::PrefixStore>(absl::StrCat("from", root),
                                                 std::move(store));
  m.timeout = timeout;
  backend::BackendConfig kind = config;
  if (kind.name == "nccl") {
    kind.name = "gloo";
    kind.shm = false;
  }
  // The error of a missing peer already names the ranks not connected.
  kind.stall_warning = absl::InfiniteDuration();
  share.receivers.assign(group.begin() + 1, group.end());
  absl::StatusOr<std::unique_ptr<backend::Backend>> made =
      backend::CreateBackend(m, kind);
  if (!made.ok()) {
    return absl::Status(
        made.status().code(),
        absl::StrCat(who, "creating a backend of rank ", root, " and ",
                     share.receivers.size(),
                     " receiving from it: ", made.status().message()));
  }
  const backend::SmallCollectives sync(**made, at::kCPU, timeout, who,
                                       "the timeout");
  if (me != root) bytes->clear();
  if (absl::Status s = sync.Broadcast(0, bytes, absl::OkStatus()); !s.ok()) {
    return absl::Status(
        s.code(), absl::StrCat(who, me == root ? "sending" : "receiving",
                               " the state of step ", generation.committed_step,
                               ": ", s.message()));
  }
  share.role =
      me == root ? StateShare::Role::kSent : StateShare::Role::kReceived;
  share.source = root;
  share.bytes = static_cast<int64_t>(bytes->size());
  share.took = absl::Now() - started;
  return share;
}

}  // namespace dtrain::trainer
