#include "trainer/metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "prometheus/text_serializer.h"

namespace dtrain::trainer {
namespace {

// How long a client may take to send its request or take the answer.
constexpr int kClientTimeoutMs = 5000;
// Requests are a line and a few headers; anything longer is not a scrape.
constexpr size_t kMaxRequestBytes = 16384;

bool IsIpv6(const std::string& address) {
  return address.find(':') != std::string::npos;
}

std::string HostPort(const std::string& address, int port) {
  return IsIpv6(address) ? absl::StrCat("[", address, "]:", port)
                         : absl::StrCat(address, ":", port);
}

// Waits until `fd` is ready for `events` or `wake` is written; false on
// wake-up, timeout or error.
bool WaitFor(int fd, short events, int wake, int timeout_ms) {
  pollfd fds[2] = {{fd, events, 0}, {wake, POLLIN, 0}};
  const int n = base::RetryOnEintr([&] { return ::poll(fds, 2, timeout_ms); });
  return n > 0 && fds[1].revents == 0 && fds[0].revents != 0;
}

// Gives up when the client does not take the data in time, or on wake-up.
bool SendAll(int fd, absl::string_view data, int wake) {
  while (!data.empty()) {
    if (!WaitFor(fd, POLLOUT, wake, kClientTimeoutMs)) return false;
    // MSG_NOSIGNAL: a scraper that hung up must not kill the process.
    const ssize_t n = base::RetryOnEintr([&] {
      return ::send(fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    });
    if (n < 0 && errno == EAGAIN) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

std::string Response(absl::string_view status, absl::string_view type,
                     absl::string_view body) {
  return absl::StrCat("HTTP/1.1 ", status, "\r\nContent-Type: ", type,
                      "\r\nContent-Length: ", body.size(),
                      "\r\nConnection: close\r\n\r\n", body);
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& bind_address, int port,
    std::shared_ptr<prometheus::Collectable> collectable) {
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics port ", port, " is not in 0..65535"));
  }
  const std::string where = HostPort(bind_address, port);
  sockaddr_storage storage = {};
  socklen_t length = 0;
  const bool v6 = IsIpv6(bind_address);
  int parsed = 0;
  if (v6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&storage);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(static_cast<uint16_t>(port));
    parsed = inet_pton(AF_INET6, bind_address.c_str(), &a->sin6_addr);
    length = sizeof(*a);
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&storage);
    a->sin_family = AF_INET;
    a->sin_port = htons(static_cast<uint16_t>(port));
    parsed = inet_pton(AF_INET, bind_address.c_str(), &a->sin_addr);
    length = sizeof(*a);
  }
  if (parsed != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot serve metrics on ", where, ": '", bind_address,
                     "' is not an IPv4 or IPv6 address"));
  }
  base::UniqueFd listener(
      ::socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!listener.valid()) {
    return base::ErrnoStatus(
        errno, absl::StrCat("cannot serve metrics on ", where, ": socket"));
  }
  // A port left in TIME_WAIT by a previous run is no reason to fail.
  const int one = 1;
  ::setsockopt(listener.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(listener.get(), reinterpret_cast<sockaddr*>(&storage), length) !=
          0 ||
      ::listen(listener.get(), 16) != 0) {
    const int error = errno;
    return absl::Status(
        error == EADDRINUSE ? absl::StatusCode::kUnavailable
                            : absl::ErrnoToStatusCode(error),
        absl::StrCat("cannot serve metrics on ", where, ": ",
                     base::ErrnoText(error),
                     error == EADDRINUSE
                         ? " (another process uses the port: choose another, "
                           "or 0 for a free one)"
                         : ""));
  }
  if (::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&storage),
                    &length) != 0) {
    return base::ErrnoStatus(
        errno, absl::StrCat("serving metrics on ", where, ": getsockname"));
  }
  const int bound =
      ntohs(v6 ? reinterpret_cast<sockaddr_in6*>(&storage)->sin6_port
               : reinterpret_cast<sockaddr_in*>(&storage)->sin_port);
  base::UniqueFd wake(::eventfd(0, EFD_CLOEXEC));
  if (!wake.valid()) {
    return base::ErrnoStatus(
        errno, absl::StrCat("serving metrics on ", where, ": eventfd"));
  }
  return std::unique_ptr<MetricsServer>(
      new MetricsServer(bind_address, bound, std::move(collectable),
                        std::move(listener), std::move(wake)));
}

MetricsServer::MetricsServer(
    std::string bind_address, int port,
    std::shared_ptr<prometheus::Collectable> collectable,
    base::UniqueFd listener, base::UniqueFd wake)
    : bind_address_(std::move(bind_address)),
      port_(port),
      collectable_(std::move(collectable)),
      listener_(std::move(listener)),
      wake_(std::move(wake)),
      thread_([this] { Serve(); }) {}

MetricsServer::~MetricsServer() {
  const uint64_t one = 1;
  // An eventfd write of 8 bytes cannot be partial; it fails only when the
  // counter would overflow, which one write cannot make it.
  (void)!::write(wake_.get(), &one, sizeof(one));
  thread_.join();
}

std::string MetricsServer::url() const {
  return absl::StrCat("http://", HostPort(bind_address_, port_), "/metrics");
}

void MetricsServer::Serve() {
  // Returns once woken (or should poll fail, which with valid descriptors
  // it does not); a wake-up during a scrape ends Answer at its next wait.
  while (WaitFor(listener_.get(), POLLIN, wake_.get(), -1)) {
    base::UniqueFd client(base::RetryOnEintr([&] {
      return ::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC);
    }));
    if (client.valid()) Answer(client.get());
  }
}

void MetricsServer::Answer(int fd) {
  std::string request;
  while (request.find("\r\n\r\n") == std::string::npos &&
         request.find("\n\n") == std::string::npos) {
    if (request.size() > kMaxRequestBytes ||
        !WaitFor(fd, POLLIN, wake_.get(), kClientTimeoutMs)) {
      return;
    }
    char buf[4096];
    const ssize_t n = base::RetryOnEintr(
        [&] { return ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT); });
    if (n < 0 && errno == EAGAIN) continue;
    if (n <= 0) return;
    request.append(buf, static_cast<size_t>(n));
  }
  const absl::string_view line =
      absl::string_view(request).substr(0, request.find_first_of("\r\n"));
  std::string response;
  if (!absl::StartsWith(line, "GET ")) {
    response =
        Response("405 Method Not Allowed", "text/plain", "only GET /metrics\n");
  } else if (absl::StartsWith(line, "GET /metrics ") ||
             absl::StartsWith(line, "GET /metrics?")) {
    response = Response(
        "200 OK", "text/plain; version=0.0.4; charset=utf-8",
        prometheus::TextSerializer().Serialize(collectable_->Collect()));
  } else {
    response =
        Response("404 Not Found", "text/plain", "metrics are on /metrics\n");
  }
  SendAll(fd, response, wake_.get());
}

}  // namespace dtrain::trainer
