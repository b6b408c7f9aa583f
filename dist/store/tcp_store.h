// TcpStore: the Store behind tcp://host:port. Rank 0 hosts the server
// (TcpStoreServer) inside its process; every rank, rank 0 included, talks to it
// as a client.
//
// Connecting retries with exponential backoff (10 ms doubling to 1 s) until
// `connect_timeout`, so ranks may start in any order. Each call borrows a
// connection from a small pool (opening one when none is idle), so a thread
// blocked in Get/Wait never holds up other threads of the process. A broken
// connection is dropped and the call fails with kUnavailable naming the server;
// the next call reconnects. Thread-safe. See docs/FORMATS.md for the
// wire format.
#ifndef DTRAIN_DIST_STORE_TCP_STORE_H_
#define DTRAIN_DIST_STORE_TCP_STORE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/posix_io.h"
#include "dist/store/store.h"

namespace dtrain::store {

// Private to this package (tcp_socket.h, tcp_store_protocol.h,
// tcp_store_server.h): declared here only for TcpStore's members.
namespace internal {
class TcpStoreServer;
}  // namespace internal
namespace protocol {
enum class Request : uint8_t;
}  // namespace protocol

struct TcpStoreOptions {
  // The server's address, as clients reach it.
  std::string host = "127.0.0.1";
  // The server's port. With is_server, 0 picks a free one (see
  // TcpStore::port()).
  int port = 29500;
  // Start the server in this process (rank 0). It binds `bind_host` (empty:
  // every interface).
  bool is_server = false;
  std::string bind_host;
  // Default for Get/Wait without a timeout, and the bound on any other call.
  absl::Duration timeout = kDefaultStoreTimeout;
  // How long to keep trying to reach the server.
  absl::Duration connect_timeout = absl::Seconds(60);
  // How long a server that accepted the connection may take to answer its
  // hello (protocol::kHelloTimeout); it answers at once from its own thread.
  absl::Duration hello_timeout = absl::Seconds(1);
  // The job's shared secret, or empty. A server with one serves only clients
  // whose hello carries it; a client presents it on every connection.
  std::string token;
  // When set: how long a reply may take past the call's own wait (a Get's or
  // a Wait's timeout; none for the other calls, which a server answers at
  // once from its own thread) before the server counts as stopped and the
  // call fails with kUnavailable. An elastic job's store sets it short, so
  // that a stopped rank's server is left for another within seconds. Unset:
  // the other calls wait `timeout` and 10 s more.
  absl::optional<absl::Duration> unresponsive_after;
};

class TcpStore : public Store {
 public:
  // Starts the server when asked, then connects (and pings) once to check that
  // the server is there and speaks this protocol. Errors name the address and
  // how long was tried.
  static absl::StatusOr<std::shared_ptr<TcpStore>> Create(
      const TcpStoreOptions& options);

  ~TcpStore() override;

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
  std::string Describe() const override;

  // The server's port (the real one when the server was started on port 0).
  int port() const { return options_.port; }
  // The server this process hosts, or null (for this package's tests).
  const internal::TcpStoreServer* server() const { return server_.get(); }

 private:
  explicit TcpStore(const TcpStoreOptions& options);

  // Sends one request and returns the kOk reply's payload, or the error the
  // reply or the connection gave. `wait` is how long the server may
  // legitimately take (blocking calls).
  absl::StatusOr<std::string> Call(protocol::Request type,
                                   absl::string_view payload,
                                   absl::string_view what, absl::Duration wait);
  absl::StatusOr<base::UniqueFd> Connect(absl::Duration timeout) const;
  // The hello on a fresh connection (tcp_store_protocol.h): OK, a transient
  // error worth retrying, or kFailedPrecondition when what answers is not a
  // dtrain store server of this protocol version (saying what it found).
  absl::Status Hello(int fd) const;

  TcpStoreOptions options_;
  std::unique_ptr<internal::TcpStoreServer> server_;
  // std::mutex rather than Abseil's, so that ThreadSanitizer builds see the
  // synchronisation (Debian's Abseil is not instrumented).
  std::mutex mu_;
  std::vector<base::UniqueFd> idle_;  // Guarded by mu_.
  // Once a hello was answered, a refused connection means the server's
  // process is gone (a job's server never comes back at its address): the
  // call fails at once instead of retrying until connect_timeout.
  mutable std::atomic<bool> reached_{false};
};

}  // namespace dtrain::store

#endif  // DTRAIN_DIST_STORE_TCP_STORE_H_
