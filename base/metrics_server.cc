#include "base/metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <iterator>
#include <list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "prometheus/text_serializer.h"

namespace dtrain::trainer {
namespace {

// How long a client may take from its connection to the last byte of the
// answer: a scrape takes milliseconds; a stranger that dawdles is dropped.
constexpr absl::Duration kClientTimeout = absl::Seconds(5);
// Requests are a line and a few headers; anything longer is not a scrape.
constexpr size_t kMaxRequestBytes = 16384;
// Connections served at once; a new one beyond this closes the oldest that
// has not finished its request, so idle strangers cannot keep out a scraper.
constexpr size_t kMaxClients = 64;

bool IsIpv6(const std::string& address) {
  return address.find(':') != std::string::npos;
}

std::string HostPort(const std::string& address, int port) {
  return IsIpv6(address) ? absl::StrCat("[", address, "]:", port)
                         : absl::StrCat(address, ":", port);
}

bool RequestComplete(const std::string& request) {
  return request.find("\r\n\r\n") != std::string::npos ||
         request.find("\n\n") != std::string::npos;
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
  base::UniqueFd listener(::socket(
      v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!listener.valid()) {
    return base::ErrnoStatus(
        errno, absl::StrCat("cannot serve metrics on ", where, ": socket"));
  }
  // A port left in TIME_WAIT by a previous run is no reason to fail.
  const int one = 1;
  ::setsockopt(listener.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(listener.get(), reinterpret_cast<sockaddr*>(&storage), length) !=
          0 ||
      ::listen(listener.get(), 128) != 0) {
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

struct MetricsServer::Client {
  base::UniqueFd fd;
  std::string request;
  std::string response;  // Set once the request is complete.
  size_t sent = 0;
  absl::Time deadline;
};

void MetricsServer::Serve() {
  // Accept order: the front is the oldest.
  std::list<Client> clients;
  absl::Time accept_paused_until = absl::InfinitePast();
  absl::Duration accept_pause = absl::Milliseconds(50);
  // Closes the oldest client still sending its request; false if none.
  const auto drop_oldest_reader = [&clients] {
    for (auto it = clients.begin(); it != clients.end(); ++it) {
      if (it->response.empty()) {
        clients.erase(it);
        return true;
      }
    }
    return false;
  };
  std::vector<pollfd> fds;
  while (true) {
    const absl::Time now = absl::Now();
    const bool accepting = now >= accept_paused_until;
    absl::Time next = accepting ? absl::InfiniteFuture() : accept_paused_until;
    fds.clear();
    fds.push_back({wake_.get(), POLLIN, 0});
    fds.push_back(
        {listener_.get(), static_cast<short>(accepting ? POLLIN : 0), 0});
    for (const Client& c : clients) {
      fds.push_back({c.fd.get(),
                     static_cast<short>(c.response.empty() ? POLLIN : POLLOUT),
                     0});
      next = std::min(next, c.deadline);
    }
    const int timeout_ms =
        next == absl::InfiniteFuture()
            ? -1
            : static_cast<int>(std::clamp<int64_t>(
                  absl::ToInt64Milliseconds(next - now) + 1, 0, 1 << 30));
    const int n = ::poll(fds.data(), fds.size(), timeout_ms);
    if (n < 0 && errno != EINTR) return;
    if (fds[0].revents != 0) return;  // Woken by the destructor.
    // Serve the clients polled (new ones are appended after them).
    size_t i = 2;
    for (auto it = clients.begin(); i < fds.size(); ++i) {
      const short revents = fds[i].revents;
      Client& c = *it;
      bool done = false;
      if (revents != 0) done = !Progress(c);
      it = done ? clients.erase(it) : std::next(it);
    }
    const absl::Time after = absl::Now();
    for (auto it = clients.begin(); it != clients.end();) {
      it = it->deadline <= after ? clients.erase(it) : std::next(it);
    }
    if (fds[1].revents & POLLIN) {
      while (true) {
        base::UniqueFd fd(::accept4(listener_.get(), nullptr, nullptr,
                                    SOCK_CLOEXEC | SOCK_NONBLOCK));
        if (!fd.valid()) {
          const int error = errno;
          if (error == EINTR || error == ECONNABORTED) continue;
          if (error != EMFILE && error != ENFILE && error != ENOBUFS &&
              error != ENOMEM) {
            break;  // EAGAIN: none left.
          }
          if (drop_oldest_reader()) continue;
          // No descriptor to give back: pause instead of spinning on a
          // listening socket that stays readable.
          accept_paused_until = absl::Now() + accept_pause;
          accept_pause = std::min(accept_pause * 2, absl::Seconds(1));
          break;
        }
        accept_pause = absl::Milliseconds(50);
        if (clients.size() >= kMaxClients && !drop_oldest_reader()) continue;
        clients.push_back(
            Client{std::move(fd), "", "", 0, absl::Now() + kClientTimeout});
      }
    }
  }
}

bool MetricsServer::Progress(Client& c) {
  if (c.response.empty()) {
    char buf[4096];
    const ssize_t n = base::RetryOnEintr(
        [&] { return ::recv(c.fd.get(), buf, sizeof(buf), 0); });
    if (n < 0 && errno == EAGAIN) return true;
    if (n <= 0) return false;
    c.request.append(buf, static_cast<size_t>(n));
    if (!RequestComplete(c.request))
      return c.request.size() <= kMaxRequestBytes;
    c.response = Answer(c.request);
  }
  // MSG_NOSIGNAL: a scraper that hung up must not kill the process.
  const ssize_t n = base::RetryOnEintr([&] {
    return ::send(c.fd.get(), c.response.data() + c.sent,
                  c.response.size() - c.sent, MSG_NOSIGNAL);
  });
  if (n < 0 && errno == EAGAIN) return true;
  if (n <= 0) return false;
  c.sent += static_cast<size_t>(n);
  return c.sent < c.response.size();
}

std::string MetricsServer::Answer(const std::string& request) const {
  const absl::string_view line =
      absl::string_view(request).substr(0, request.find_first_of("\r\n"));
  if (!absl::StartsWith(line, "GET ")) {
    return Response("405 Method Not Allowed", "text/plain",
                    "only GET /metrics\n");
  }
  if (absl::StartsWith(line, "GET /metrics ") ||
      absl::StartsWith(line, "GET /metrics?")) {
    return Response(
        "200 OK", "text/plain; version=0.0.4; charset=utf-8",
        prometheus::TextSerializer().Serialize(collectable_->Collect()));
  }
  return Response("404 Not Found", "text/plain", "metrics are on /metrics\n");
}

}  // namespace dtrain::trainer
