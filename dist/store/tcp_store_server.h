// The TcpStore server: holds the keys in memory and serves any number of
// clients from one background thread (poll). Rank 0 hosts it inside its own
// process; TcpStore::Create starts it.
//
// Robustness: every frame is validated (magic, version, size cap, field
// bounds). A frame that breaks the framing (bad magic or version, payload over
// the cap) gets a kProtocol reply and that connection alone is closed; a
// well-framed but malformed or unknown request gets a kInvalid reply and the
// connection stays open. Memory per client is bounded by the payload cap;
// clients over `max_clients` are told so and closed. With a token, only
// clients that present it in their hello get any further. Blocking Get/Wait are
// answered when their keys appear or, at the deadline the client sent, with
// kDeadline: the server owns timeouts, so replies never arrive out of order.
//
// Thread safety: Start/port/destructor from one thread; the serving happens on
// the internal thread.
#ifndef DTRAIN_DIST_STORE_TCP_STORE_SERVER_H_
#define DTRAIN_DIST_STORE_TCP_STORE_SERVER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "base/posix_io.h"
#include "dist/store/tcp_socket.h"
#include "dist/store/tcp_store_protocol.h"

namespace dtrain::store::internal {

struct TcpStoreServerOptions {
  // Address to bind; empty means every interface (IPv6 and IPv4).
  std::string host;
  // 0 picks a free port; TcpStoreServer::port() reports it.
  int port = 0;
  uint32_t max_payload_bytes = protocol::kDefaultMaxPayload;
  // Connections beyond this are answered with a kProtocol error and closed.
  int max_clients = 4096;
  // When set, a connection may do nothing but the hello until its hello
  // carries this token; anything else is refused with a kProtocol error, the
  // connection closed and the peer's address logged (docs/RELIABILITY.md).
  std::string token;
  // Where refusals are logged; stderr if unset.
  std::function<void(const std::string&)> log;
};

class TcpStoreServer {
 public:
  // Binds, listens and starts serving. kUnavailable (naming the address) when
  // the port is taken.
  static absl::StatusOr<std::unique_ptr<TcpStoreServer>> Start(
      const TcpStoreServerOptions& options);

  // Stops the thread and closes every connection.
  ~TcpStoreServer();

  int port() const { return port_; }
  // Frames rejected for breaking the protocol since start (for tests and
  // diagnostics).
  int64_t protocol_errors() const { return protocol_errors_.load(); }

 private:
  class Loop;
  TcpStoreServer() = default;

  int port_ = 0;
  base::UniqueFd wake_write_;
  std::unique_ptr<Loop> loop_;
  std::thread thread_;
  std::atomic<int64_t> protocol_errors_{0};
};

}  // namespace dtrain::store::internal

#endif  // DTRAIN_DIST_STORE_TCP_STORE_SERVER_H_
