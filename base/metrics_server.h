// Serves Prometheus metrics over HTTP on /metrics, for the trainer's
// --metrics_port and the sweep's: a listening socket and one thread that
// answers one scrape at a time with the text exposition format
// (prometheus-cpp's TextSerializer over the collectable).
//
//   DTRAIN_ASSIGN_OR_RETURN(std::unique_ptr<MetricsServer> server,
//                           MetricsServer::Start("0.0.0.0", 0, collectable));
//   server->url();  // "http://0.0.0.0:41234/metrics"
//
// Not prometheus-cpp's Exposer: its civetweb starts threads with a fixed
// 100 KiB stack, which pthread_create refuses (EINVAL) in a process whose
// libraries' static TLS is larger, as LibTorch's with OpenBLAS and glog is
// (about 120 KiB), so it cannot serve from `train`.
//
// Lifetime: serving starts in Start and stops in the destructor, which wakes
// the thread, waits for it (a scrape in flight is cut short) and closes the
// socket, so the port is free when it returns. The server keeps the
// collectable alive while it serves. Thread-safe: the accessors may be
// called from any thread.
//
// Strangers who can reach the port (docs/RELIABILITY.md): up to 64 clients
// are served at once, each given 5 s from connecting to the last byte of its
// answer and 16 KiB of request; when 64 are connected, a new one closes the
// oldest that has not finished its request; out of descriptors, the server
// closes such a client or pauses accepting rather than spinning.
#ifndef DTRAIN_BASE_METRICS_SERVER_H_
#define DTRAIN_BASE_METRICS_SERVER_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "base/posix_io.h"
#include "prometheus/collectable.h"

namespace dtrain::trainer {

class MetricsServer {
 public:
  // Binds `bind_address` (an IPv4 address, "0.0.0.0" for every interface, or
  // an IPv6 address such as "::1") on `port` (0: a free port the kernel
  // picks; port() then tells which). kInvalidArgument for a port outside
  // 0..65535 or an address that is not an IP address; otherwise the bind's
  // error (kUnavailable for a port in use), naming the address and port and
  // the system's reason: "cannot serve metrics on 0.0.0.0:9465: Address
  // already in use (...)".
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const std::string& bind_address, int port,
      std::shared_ptr<prometheus::Collectable> collectable);

  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // The port it listens on (the kernel's choice for port 0).
  int port() const { return port_; }
  // http://ADDRESS:PORT/metrics (IPv6 addresses in brackets).
  std::string url() const;

 private:
  MetricsServer(std::string bind_address, int port,
                std::shared_ptr<prometheus::Collectable> collectable,
                base::UniqueFd listener, base::UniqueFd wake);
  struct Client;
  // The serving thread: accepts and answers until woken.
  void Serve();
  // Reads from or writes to a ready client; false once it is done or failed.
  bool Progress(Client& c);
  // The HTTP response to a complete request.
  std::string Answer(const std::string& request) const;

  const std::string bind_address_;
  const int port_;
  const std::shared_ptr<prometheus::Collectable> collectable_;
  const base::UniqueFd listener_;
  // An eventfd: written once by the destructor to stop the thread.
  const base::UniqueFd wake_;
  std::thread thread_;
};

}  // namespace dtrain::trainer

#endif  // DTRAIN_BASE_METRICS_SERVER_H_
