#include "dist/rendezvous/init.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdio>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/posix_io.h"
#include "base/rank_status.h"
#include "base/status_macros.h"
#include "dist/store/c10d_store.h"
#include "dist/store/file_store.h"
#include "dist/store/hash_store.h"
#include "dist/store/prefix_store.h"
#include "dist/store/tcp_store.h"

namespace dtrain::rendezvous {
namespace {

using store::FileStore;
using store::HashStore;
using store::PrefixStore;
using store::Store;
using store::TcpStore;
using store::TcpStoreOptions;

// env:// ranks meet at the master address, and MPI launchers do not set one:
// with several ranks, the default 127.0.0.1 is right on one node only, and
// ranks elsewhere would wait out the timeout at their own loopback.
absl::Status CheckEnvMasterAddr(const LaunchEnv& launch) {
  if (launch.world_size == 1 || launch.master_addr_from != "default") {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "env:// with ", launch.world_size, " ranks (from ", launch.source_name(),
      ") needs the master's address: set MASTER_ADDR (under Slurm the first "
      "host of SLURM_JOB_NODELIST is used)"));
}

// Whether every address `host` resolves to is a loopback one; nullopt when it
// does not resolve.
std::optional<bool> ResolvesToLoopbackOnly(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0)
    return std::nullopt;
  bool loopback_only = true;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(a->ai_addr);
      loopback_only &= (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    } else if (a->ai_family == AF_INET6) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(a->ai_addr);
      loopback_only &= IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr) != 0;
    }
  }
  ::freeaddrinfo(found);
  return loopback_only;
}

// The store listens where the ranks reach it, not on every interface: the
// master's address. One exception: a job across hosts whose master name
// resolves here only to loopback (Debian's /etc/hosts maps the host's own
// name to 127.0.1.1) would be unreachable from the other hosts, so it
// listens on every interface, as before.
std::string DefaultBindHost(const std::string& host, const LaunchEnv& launch) {
  const std::optional<bool> loopback_only = ResolvesToLoopbackOnly(host);
  if (!loopback_only.has_value()) return "";
  // A loopback address written as such means one host.
  const bool loopback_literal =
      host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
  const bool one_host =
      !launch.local_inferred && launch.local_world_size == launch.world_size;
  if (*loopback_only && !loopback_literal && !one_host) return "";
  return host;
}

// What to change when the store's place is taken by another job: a busy
// port, or a rendezvous that met another job's ranks there.
std::string AnotherPlace(const InitMethod& method) {
  switch (method.scheme) {
    case InitMethod::kEnv:
      return "choose another port with --master_port (MASTER_PORT), or "
             "--master_port=0 for a free one";
    case InitMethod::kTcp:
      return absl::StrCat("choose another port than ", method.port, " in '",
                          method.ToString(), "'");
    case InitMethod::kFile:
      return absl::StrCat("give each job a file of its own, not '", method.path,
                          "'");
  }
  return "";
}

absl::Status WithHint(const absl::Status& s, const InitMethod& method) {
  const bool question = absl::EndsWith(s.message(), "?");
  return absl::Status(s.code(), absl::StrCat(s.message(), question ? " " : "; ",
                                             AnotherPlace(method)));
}

absl::StatusOr<std::shared_ptr<Store>> OpenStore(const InitOptions& options,
                                                 const InitMethod& method,
                                                 const LaunchEnv& launch,
                                                 const EnvMap& env) {
  if (method.scheme == InitMethod::kFile) {
    return FileStore::Open(method.path, launch.world_size, options.timeout);
  }
  // A single process found by env:// has nobody to meet: an in-memory store
  // spares it a port, so several single-process jobs can run side by side.
  // (An explicit tcp:// is honoured even then.)
  if (method.scheme == InitMethod::kEnv && launch.world_size == 1) {
    return std::shared_ptr<Store>(std::make_shared<HashStore>());
  }
  // torchrun's agent already serves a c10d store on the master port. A
  // namespace per restart keeps an attempt clear of the one before.
  if (method.scheme == InitMethod::kEnv && launch.agent_store) {
    store::C10dStoreOptions c10d;
    c10d.host = launch.master_addr;
    c10d.port = launch.master_port;
    c10d.timeout = options.timeout;
    DTRAIN_ASSIGN_OR_RETURN(std::shared_ptr<store::C10dStore> agent,
                            store::C10dStore::Connect(c10d));
    return std::shared_ptr<Store>(std::make_shared<PrefixStore>(
        absl::StrCat("dtrain/attempt_", launch.restart_count),
        std::move(agent)));
  }
  TcpStoreOptions tcp;
  if (method.scheme == InitMethod::kTcp) {
    tcp.host = method.host;
    tcp.port = method.port;
  } else {
    tcp.host = launch.master_addr;
    tcp.port = launch.master_port;
  }
  if (tcp.port == 0 && launch.world_size > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "port 0 in '", method.ToString(),
        "' cannot be shared with other ranks: give the master a fixed port"));
  }
  tcp.is_server = launch.rank == 0;
  tcp.bind_host = options.bind_host == "*" ? ""
                  : !options.bind_host.empty()
                      ? options.bind_host
                      : DefaultBindHost(tcp.host, launch);
  DTRAIN_ASSIGN_OR_RETURN(tcp.token, StoreToken(env));
  tcp.timeout = options.timeout;
  tcp.connect_timeout = options.timeout;
  DTRAIN_ASSIGN_OR_RETURN(std::shared_ptr<TcpStore> store,
                          TcpStore::Create(tcp));
  if (tcp.is_server && tcp.token.empty() &&
      (tcp.bind_host.empty() ||
       !ResolvesToLoopbackOnly(tcp.bind_host).value_or(false))) {
    // The documented default for a job across hosts is a token
    // (docs/RELIABILITY.md): say so where the job's log will show it.
    std::fprintf(
        stderr,
        "rank 0: warning: the store %s (listening on %s) has no "
        "token: anyone who can reach the port can read, change or "
        "delete the job's rendezvous keys and so end the job. Set "
        "DTRAIN_STORE_TOKEN (or DTRAIN_STORE_TOKEN_FILE) to the same "
        "secret on every rank (docs/RELIABILITY.md).\n",
        store->Describe().c_str(),
        tcp.bind_host.empty() ? "every interface" : tcp.bind_host.c_str());
  }
  return std::shared_ptr<Store>(std::move(store));
}

}  // namespace

backend::Membership World::membership(absl::Duration timeout) const {
  backend::Membership m;
  m.rank = rank;
  m.world_size = world_size;
  m.store = store;
  m.timeout = timeout;
  return m;
}

absl::StatusOr<World> InitWorld(const InitOptions& options, const EnvMap& env) {
  DTRAIN_ASSIGN_OR_RETURN(const InitMethod method,
                          ParseInitMethod(options.url));
  DTRAIN_ASSIGN_OR_RETURN(const ExplicitArgs args,
                          MergeQueryArgs(options.args, method));
  DTRAIN_ASSIGN_OR_RETURN(const LaunchEnv launch, DiscoverLaunchEnv(env, args));
  if (method.scheme == InitMethod::kEnv) {
    absl::Status status = CheckEnvMasterAddr(launch);
    if (!status.ok()) return base::WithRank(launch.rank, status);
  }

  absl::StatusOr<std::shared_ptr<Store>> base =
      OpenStore(options, method, launch, env);
  if (!base.ok()) {
    // The TCP store's own words for a busy port (tcp_socket.cc's Listen).
    if (absl::StrContains(base.status().message(), base::ErrnoText(EADDRINUSE)))
      return base::WithRank(launch.rank, WithHint(base.status(), method));
    return base::WithRank(launch.rank, base.status());
  }

  RendezvousOptions rdzv;
  rdzv.rank = launch.rank;
  rdzv.world_size = launch.world_size;
  rdzv.local_rank = launch.local_rank;
  rdzv.timeout = options.timeout;
  absl::StatusOr<std::vector<PeerInfo>> peers = Rendezvous(**base, rdzv);
  if (absl::IsAlreadyExists(peers.status()))  // Another job's ranks, maybe.
    return WithHint(peers.status(), method);
  DTRAIN_RETURN_IF_ERROR(peers.status());

  World world;
  world.rank = launch.rank;
  world.world_size = launch.world_size;
  world.local_rank = launch.local_rank;
  world.local_world_size = launch.local_world_size;
  world.method = method;
  world.launch = launch;
  world.store =
      std::make_shared<PrefixStore>(kJobStorePrefix, *std::move(base));
  world.peers = *std::move(peers);
  return world;
}

}  // namespace dtrain::rendezvous
