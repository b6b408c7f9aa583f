#include "dist/store/failover_store.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "dist/store/tcp_socket.h"
#include "dist/store/tcp_store_server.h"

namespace dtrain::store {

std::string StoreEndpoint::ToString() const {
  return internal::JoinHostPort(host, port);
}

absl::StatusOr<StoreEndpoint> StoreEndpoint::Parse(absl::string_view text) {
  const size_t colon = text.rfind(':');
  StoreEndpoint e;
  if (colon == absl::string_view::npos || colon == 0 ||
      !absl::SimpleAtoi(text.substr(colon + 1), &e.port) || e.port <= 0 ||
      e.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a store endpoint (host:port): '", text, "'"));
  }
  absl::string_view host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  e.host = std::string(host);
  return e;
}

absl::StatusOr<std::string> StandbyHostToward(absl::string_view master_host,
                                              int master_port) {
  if (master_host.empty() || master_host == "localhost" ||
      absl::StartsWith(master_host, "127.") || master_host == "::1") {
    return std::string("127.0.0.1");
  }
  return internal::LocalAddressToward(master_host, master_port);
}

absl::StatusOr<std::unique_ptr<StoreStandby>> StoreStandby::Start(
    const StoreStandbyOptions& options) {
  internal::TcpStoreServerOptions server;
  server.host = options.host;
  server.port = 0;
  server.token = options.token;
  std::unique_ptr<StoreStandby> standby(new StoreStandby());
  DTRAIN_ASSIGN_OR_RETURN(standby->server_,
                          internal::TcpStoreServer::Start(server));
  standby->endpoint_ = {options.host, standby->server_->port()};
  return standby;
}

StoreStandby::~StoreStandby() = default;

namespace {

// The probe, and the client it made when the endpoint serves.
EndpointState Probe(const StoreEndpoint& e, const FailoverStoreOptions& options,
                    absl::Duration hello_timeout,
                    std::shared_ptr<TcpStore>* client, std::string* why) {
  // One attempt: a refusal means the process is gone, at once.
  absl::StatusOr<base::UniqueFd> fd = internal::ConnectOnce(
      e.host, e.port, absl::Now() + options.probe_timeout);
  if (!fd.ok()) {
    if (why != nullptr) *why = std::string(fd.status().message());
    return EndpointState::kGone;
  }
  fd->Reset();
  // Something listens there: it serves if its hello comes back in time.
  TcpStoreOptions o = options.client;
  o.host = e.host;
  o.port = e.port;
  o.is_server = false;
  o.connect_timeout = options.probe_timeout;
  o.hello_timeout = hello_timeout;
  absl::StatusOr<std::shared_ptr<TcpStore>> store = TcpStore::Create(o);
  if (!store.ok()) {
    if (why != nullptr) *why = std::string(store.status().message());
    return EndpointState::kSilent;
  }
  if (client != nullptr) *client = *std::move(store);
  return EndpointState::kServing;
}

}  // namespace

EndpointState ProbeEndpoint(const StoreEndpoint& endpoint,
                            const FailoverStoreOptions& options,
                            std::string* why) {
  return Probe(endpoint, options, options.hello_timeout, nullptr, why);
}

FailoverStore::FailoverStore(std::vector<StoreEndpoint> endpoints,
                             const FailoverStoreOptions& options)
    : Store(options.client.timeout),
      endpoints_(std::move(endpoints)),
      options_(options),
      skipped_(endpoints_.size(), false) {}

absl::StatusOr<std::shared_ptr<FailoverStore>> FailoverStore::Create(
    std::vector<StoreEndpoint> endpoints, const FailoverStoreOptions& options) {
  if (endpoints.empty()) {
    return absl::InvalidArgumentError("a failover store needs an endpoint");
  }
  std::shared_ptr<FailoverStore> store(
      new FailoverStore(std::move(endpoints), options));
  DTRAIN_RETURN_IF_ERROR(store->Failover().status());
  return store;
}

absl::StatusOr<int> FailoverStore::Failover() {
  std::lock_guard<std::mutex> failover_lock(failover_mu_);
  std::vector<std::string> why;
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    const StoreEndpoint& e = endpoints_[i];
    if (skipped_[i]) {
      why.push_back(absl::StrCat(e.ToString(), ": skipped before"));
      continue;
    }
    std::shared_ptr<TcpStore> store;
    std::string reason;
    // The choice is for good: the job client's longer wait, so that a
    // loaded machine does not make survivors choose differently.
    if (Probe(e, options_, options_.client.hello_timeout, &store, &reason) !=
        EndpointState::kServing) {
      skipped_[i] = true;
      why.push_back(absl::StrCat(e.ToString(), ": ", reason));
      continue;
    }
    std::lock_guard<std::mutex> lock(mu_);
    current_ = std::move(store);
    serving_ = static_cast<int>(i);
    return serving_;
  }
  return absl::UnavailableError(absl::StrCat(
      "no store server of the job answers (", absl::StrJoin(why, "; "), ")"));
}

int FailoverStore::serving() const {
  std::lock_guard<std::mutex> lock(mu_);
  return serving_;
}

std::shared_ptr<TcpStore> FailoverStore::Current() const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_;
}

absl::Status FailoverStore::Set(absl::string_view key,
                                absl::string_view value) {
  return Current()->Set(key, value);
}

absl::StatusOr<std::string> FailoverStore::Get(absl::string_view key,
                                               absl::Duration timeout) {
  return Current()->Get(key, timeout);
}

absl::StatusOr<int64_t> FailoverStore::Add(absl::string_view key,
                                           int64_t delta) {
  return Current()->Add(key, delta);
}

absl::StatusOr<std::string> FailoverStore::CompareSet(
    absl::string_view key, absl::string_view expected,
    absl::string_view desired) {
  return Current()->CompareSet(key, expected, desired);
}

absl::StatusOr<bool> FailoverStore::Check(absl::Span<const std::string> keys) {
  return Current()->Check(keys);
}

absl::Status FailoverStore::Wait(absl::Span<const std::string> keys,
                                 absl::Duration timeout) {
  return Current()->Wait(keys, timeout);
}

absl::StatusOr<bool> FailoverStore::Delete(absl::string_view key) {
  return Current()->Delete(key);
}

absl::StatusOr<int64_t> FailoverStore::NumKeys() {
  return Current()->NumKeys();
}

std::string FailoverStore::Describe() const { return Current()->Describe(); }

}  // namespace dtrain::store
