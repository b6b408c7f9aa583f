// The TcpStore server: holds the keys in memory and serves any number of
// clients from one background thread (poll). Rank 0 hosts it inside its own
// process; TcpStore::Create starts it.
//
// Robustness: every frame is validated (magic, version, size cap, field
// bounds). A frame that breaks the framing (bad magic or version, payload over
// the cap) gets a kProtocol reply and that connection alone is closed; a
// well-framed but malformed or unknown request gets a kInvalid reply and the
// connection stays open. Memory per client is bounded by the payload cap.
// Clients over `max_clients` are told so and closed. With a token, only
// clients that present it in their hello get any further. Blocking Get/Wait are
// answered when their keys appear or, at the deadline the client sent, with
// kDeadline: the server owns timeouts, so replies never arrive out of order.
//
// Strangers (docs/RELIABILITY.md, "Who can reach the store"): a connection is
// pending until its first frame is accepted (with a token, a hello that
// carries it). A pending connection may send at most `max_hello_bytes`, must
// finish its first frame within `hello_timeout`, and counts against
// `max_pending`, not `max_clients`: when that many are pending, the oldest is
// told to retry and closed, so idle or slow strangers can neither pile up nor
// lock out a rank that joins late. Out of descriptors (EMFILE), the server
// closes its oldest pending connection or, with none, stops accepting for a
// while instead of spinning. Both caps are held under half of the process's
// descriptor limit, leaving the rest to checkpoints, data and the backends.
//
// Thread safety: Start/port/destructor from one thread; the serving happens on
// the internal thread; the counters may be read from any thread.
#ifndef DTRAIN_DIST_STORE_TCP_STORE_SERVER_H_
#define DTRAIN_DIST_STORE_TCP_STORE_SERVER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
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
  // Cap on a frame from a pending connection (see above).
  uint32_t max_hello_bytes = protocol::kMaxHelloPayload;
  // A pending connection that has not sent a whole first frame this long
  // after it was accepted is closed. Clients send their hello as soon as they
  // connect and wait protocol::kHelloTimeout for the answer.
  absl::Duration hello_timeout = absl::Seconds(2);
  // Pending connections held at most; a new one closes the oldest.
  int max_pending = 256;
  // Accepted connections beyond this are answered with a kProtocol error
  // and closed.
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
  int64_t protocol_errors() const { return counters_.protocol_errors.load(); }
  // Pending connections closed for being too slow or too many.
  int64_t strangers_dropped() const {
    return counters_.strangers_dropped.load();
  }
  // Times the server stopped accepting for lack of descriptors.
  int64_t accept_pauses() const { return counters_.accept_pauses.load(); }
  // The caps in force: the options' values, lowered to fit the process's
  // descriptor limit.
  int max_pending() const { return max_pending_; }
  int max_clients() const { return max_clients_; }

  struct Counters {
    std::atomic<int64_t> protocol_errors{0};
    std::atomic<int64_t> strangers_dropped{0};
    std::atomic<int64_t> accept_pauses{0};
  };

 private:
  class Loop;
  TcpStoreServer() = default;

  int port_ = 0;
  int max_pending_ = 0;
  int max_clients_ = 0;
  base::UniqueFd wake_write_;
  std::unique_ptr<Loop> loop_;
  std::thread thread_;
  Counters counters_;
};

}  // namespace dtrain::store::internal

#endif  // DTRAIN_DIST_STORE_TCP_STORE_SERVER_H_
