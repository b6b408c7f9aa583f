// Serves Prometheus metrics over HTTP on /metrics (prometheus-cpp's Exposer,
// civetweb underneath), for the trainer's --metrics_port and the sweep's.
//
//   DTRAIN_ASSIGN_OR_RETURN(std::unique_ptr<MetricsServer> server,
//                           MetricsServer::Start("0.0.0.0", 0, collectable));
//   server->url();  // "http://0.0.0.0:41234/metrics"
//
// Lifetime: serving starts in Start and stops in the destructor, which
// returns once the listening socket is closed and scrapes in flight are
// answered. The server keeps the collectable alive while it serves.
// Thread-safe: the accessors may be called from any thread; the serving
// threads are civetweb's own.
#ifndef DTRAIN_TRAINER_METRICS_SERVER_H_
#define DTRAIN_TRAINER_METRICS_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "prometheus/collectable.h"

namespace prometheus {
class Exposer;
}  // namespace prometheus

namespace dtrain::trainer {

class MetricsServer {
 public:
  // Binds `bind_address` (an IPv4 address, "0.0.0.0" for every interface, or
  // an IPv6 address such as "::1") on `port` (0: a free port the kernel
  // picks; port() then tells which). kInvalidArgument for a port outside
  // 0..65535 or an empty address; kUnavailable naming the address and port
  // when they cannot be bound (in use, not an address of this host), with
  // the system's reason where it can be found.
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
                std::unique_ptr<prometheus::Exposer> exposer);

  const std::string bind_address_;
  const int port_;
  const std::shared_ptr<prometheus::Collectable> collectable_;
  std::unique_ptr<prometheus::Exposer> exposer_;
};

}  // namespace dtrain::trainer

#endif  // DTRAIN_TRAINER_METRICS_SERVER_H_
