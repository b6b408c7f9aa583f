#include "trainer/metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/posix_io.h"
#include "prometheus/exposer.h"

namespace dtrain::trainer {
namespace {

bool IsIpv6(const std::string& address) {
  return address.find(':') != std::string::npos;
}

// civetweb's listening_ports syntax: "ADDR:PORT", "[ADDR]:PORT" for IPv6.
std::string HostPort(const std::string& address, int port) {
  return IsIpv6(address) ? absl::StrCat("[", address, "]:", port)
                         : absl::StrCat(address, ":", port);
}

// civetweb reports only that it could not bind: binding a socket of our own
// to the same address says why (EADDRINUSE, EADDRNOTAVAIL, EACCES, ...).
std::string WhyCannotBind(const std::string& address, int port) {
  sockaddr_storage storage = {};
  socklen_t length = 0;
  const bool v6 = IsIpv6(address);
  if (v6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&storage);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(static_cast<uint16_t>(port));
    if (inet_pton(AF_INET6, address.c_str(), &a->sin6_addr) != 1)
      return "not an IPv6 address";
    length = sizeof(*a);
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&storage);
    a->sin_family = AF_INET;
    a->sin_port = htons(static_cast<uint16_t>(port));
    if (inet_pton(AF_INET, address.c_str(), &a->sin_addr) != 1)
      return "not an IPv4 address";
    length = sizeof(*a);
  }
  base::UniqueFd fd(::socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM, 0));
  if (!fd.valid()) return base::ErrnoText(errno);
  const int one = 1;
  // As civetweb binds: a port in TIME_WAIT is no reason.
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&storage), length) != 0)
    return base::ErrnoText(errno);
  if (::listen(fd.get(), 1) != 0) return base::ErrnoText(errno);
  return "";
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& bind_address, int port,
    std::shared_ptr<prometheus::Collectable> collectable) {
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics port ", port, " is not in 0..65535"));
  }
  if (bind_address.empty()) {
    return absl::InvalidArgumentError("metrics bind address is empty");
  }
  const std::string where = HostPort(bind_address, port);
  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    exposer = std::make_unique<prometheus::Exposer>(
        std::vector<std::string>{"listening_ports", where, "num_threads", "2"});
  } catch (const std::exception& e) {
    const std::string why = WhyCannotBind(bind_address, port);
    return absl::UnavailableError(absl::StrCat(
        "cannot serve metrics on ", where, ": ",
        why.empty() ? std::string(e.what()) : why,
        port > 0 ? " (is another process using the port? choose another, or "
                   "0 for a free one)"
                 : ""));
  }
  const std::vector<int> ports = exposer->GetListeningPorts();
  if (ports.empty()) {
    return absl::InternalError(
        absl::StrCat("serving metrics on ", where, ": no listening port"));
  }
  exposer->RegisterCollectable(collectable);
  return std::unique_ptr<MetricsServer>(new MetricsServer(
      bind_address, ports[0], std::move(collectable), std::move(exposer)));
}

MetricsServer::MetricsServer(
    std::string bind_address, int port,
    std::shared_ptr<prometheus::Collectable> collectable,
    std::unique_ptr<prometheus::Exposer> exposer)
    : bind_address_(std::move(bind_address)),
      port_(port),
      collectable_(std::move(collectable)),
      exposer_(std::move(exposer)) {}

// ~Exposer stops civetweb: its threads join and the socket closes.
MetricsServer::~MetricsServer() = default;

std::string MetricsServer::url() const {
  return absl::StrCat("http://", HostPort(bind_address_, port_), "/metrics");
}

}  // namespace dtrain::trainer
