// The store of an elastic job, which outlives any one process. Every rank
// serves a store of its own (a StoreStandby, started with the process) and
// publishes where; the job uses the lowest-ranked one that answers. The keys
// are soft state: after a failure the survivors register again in a new
// generation's namespace (docs/RELIABILITY.md, "Elastic training"), so a
// server that takes over starts empty and nothing is copied or replicated.
//
//   // Every rank, at start-up, before the rendezvous:
//   DTRAIN_ASSIGN_OR_RETURN(std::unique_ptr<StoreStandby> standby,
//                           StoreStandby::Start({host, token}));
//   ... publish standby->endpoint(), learn every rank's, in rank order ...
//   DTRAIN_ASSIGN_OR_RETURN(std::shared_ptr<FailoverStore> store,
//                           FailoverStore::Create(endpoints, options));
//   ... use *store ...; when a call gives kUnavailable:
//   DTRAIN_ASSIGN_OR_RETURN(int serving, store->Failover());
//   ... register in the next generation's namespace ...
//
// Calls go to the current server. When it is gone they fail with
// kUnavailable, as TcpStore's do, and are never retried against another
// server, whose keys are not these. Failover() chooses again: the endpoints in
// order, skipping those whose process is gone (the connection is refused) or
// that accept a connection but do not answer its hello within the client's
// hello_timeout (a stopped process: the kernel accepts for it). A skipped
// endpoint is never used again, so a rank that was stopped and resumes cannot
// take the store back. Every survivor applies the same rule to the same
// processes and so meets the others at the lowest live server; processes are
// assumed to fail by stopping, not by being cut off from some of the others (no
// network partitions), as PyTorch's c10d rendezvous assumes.
//
// Thread-safe: calls may run concurrently with each other and with Failover
// (a call started before a failover finishes against the old server).
#ifndef DTRAIN_DIST_STORE_FAILOVER_STORE_H_
#define DTRAIN_DIST_STORE_FAILOVER_STORE_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dist/store/store.h"
#include "dist/store/tcp_store.h"

namespace dtrain::store {

// Private to this package: declared here only for StoreStandby's member.
namespace internal {
class TcpStoreServer;
}  // namespace internal

struct StoreEndpoint {
  std::string host;
  int port = 0;
  // "host:port" (IPv6 literals in brackets).
  std::string ToString() const;
  // ToString's form back; kInvalidArgument quoting anything else.
  static absl::StatusOr<StoreEndpoint> Parse(absl::string_view text);
};

// The address to serve this rank's standby on, in a job whose first store
// is at master_host:master_port: loopback when that is loopback (a job on one
// host; also without a master, as with file:// init), otherwise this
// machine's address on the route to it, which the other hosts reach (not the
// host name, which Debian maps to 127.0.1.1). kUnavailable naming the master
// when it has no route.
absl::StatusOr<std::string> StandbyHostToward(absl::string_view master_host,
                                              int master_port);

struct StoreStandbyOptions {
  // The address to bind and that the other ranks reach: this rank's address
  // on the job's network (loopback for a job on one host).
  std::string host = "127.0.0.1";
  // The job's shared secret (TcpStoreOptions::token), or empty.
  std::string token;
};

// A rank's own store server, serving from start-up so that taking over needs
// no step of its own: a rank busy in a long forward still answers.
class StoreStandby {
 public:
  // kUnavailable naming the address when it cannot listen there.
  static absl::StatusOr<std::unique_ptr<StoreStandby>> Start(
      const StoreStandbyOptions& options);
  ~StoreStandby();

  const StoreEndpoint& endpoint() const { return endpoint_; }

 private:
  StoreStandby() = default;
  std::unique_ptr<internal::TcpStoreServer> server_;
  StoreEndpoint endpoint_;
};

struct FailoverStoreOptions {
  // How long a connection to an endpoint may take (a refusal is at once).
  absl::Duration probe_timeout = absl::Seconds(2);
  // ProbeEndpoint's wait for the hello of an endpoint that accepted the
  // connection, before it counts as silent (stopped). A live server answers
  // at once, from its own thread, however busy its process is; a process
  // being torn down after SIGKILL may accept for a while, and a short wait
  // lets the caller, which probes again and again through a grace, look
  // again soon and find it gone. (Failover waits the client's
  // hello_timeout: its choice is final.)
  absl::Duration hello_timeout = absl::Milliseconds(250);
  // The client's settings (token, call timeout, reconnect timeout); host,
  // port and is_server are set per endpoint.
  TcpStoreOptions client;
};

// What a probe of a rank's standby found.
enum class EndpointState {
  kServing,  // A store server of this protocol answered.
  kGone,     // Nothing listens there: the process is dead.
  kSilent,   // It accepts connections but does not answer (a stopped
             // process, whose kernel still accepts), or answers as
             // something else.
};

// One look at `endpoint`, taking at most probe_timeout + hello_timeout: what
// the elastic controller asks of a rank that has not joined the next generation
// (dist/rendezvous/next_generation.h), and what Failover asks of each
// candidate. `why` (when not null) receives the reason for kGone and kSilent.
EndpointState ProbeEndpoint(const StoreEndpoint& endpoint,
                            const FailoverStoreOptions& options,
                            std::string* why = nullptr);

class FailoverStore : public Store {
 public:
  // Connects to the lowest endpoint that answers (as Failover does).
  // kInvalidArgument for no endpoints; kUnavailable when none answers,
  // saying why each was skipped.
  static absl::StatusOr<std::shared_ptr<FailoverStore>> Create(
      std::vector<StoreEndpoint> endpoints,
      const FailoverStoreOptions& options = {});

  // Chooses the server again, from the lowest endpoint not skipped before,
  // the current one included (it may answer again after a broken
  // connection). Returns its index. kUnavailable, naming every endpoint and
  // why it was skipped, when none answers.
  absl::StatusOr<int> Failover();
  // The index of the endpoint in use.
  int serving() const;

  using Store::Get;
  using Store::Wait;

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key,
                                  absl::Duration timeout) override;
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;
  absl::StatusOr<std::string> CompareSet(absl::string_view key,
                                         absl::string_view expected,
                                         absl::string_view desired) override;
  absl::StatusOr<bool> Check(absl::Span<const std::string> keys) override;
  absl::Status Wait(absl::Span<const std::string> keys,
                    absl::Duration timeout) override;
  absl::StatusOr<bool> Delete(absl::string_view key) override;
  absl::StatusOr<int64_t> NumKeys() override;
  // The server in use, as its errors name it: "tcp://host:port".
  std::string Describe() const override;

 private:
  FailoverStore(std::vector<StoreEndpoint> endpoints,
                const FailoverStoreOptions& options);
  std::shared_ptr<TcpStore> Current() const;

  const std::vector<StoreEndpoint> endpoints_;
  const FailoverStoreOptions options_;
  // Serialises Failover; guards skipped_ (held before mu_ when both are).
  std::mutex failover_mu_;
  std::vector<bool> skipped_;
  // Guards the server in use.
  mutable std::mutex mu_;
  std::shared_ptr<TcpStore> current_;
  int serving_ = -1;
};

}  // namespace dtrain::store

#endif  // DTRAIN_DIST_STORE_FAILOVER_STORE_H_
