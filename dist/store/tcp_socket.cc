#include "dist/store/tcp_socket.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"

namespace dtrain::store::internal {
namespace {

int RemainingMs(absl::Time deadline) {
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  // Round up so that a sub-millisecond remainder still waits.
  return static_cast<int>(
      std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 1 << 30));
}

// Waits for `events` on fd until the deadline: OK, kDeadlineExceeded, or
// kUnavailable on error.
absl::Status PollFor(int fd, short events, absl::Time deadline) {
  pollfd p{fd, events, 0};
  // Each retry waits only for what is left of the deadline.
  const int n =
      base::RetryOnEintr([&] { return ::poll(&p, 1, RemainingMs(deadline)); });
  if (n > 0) return absl::OkStatus();
  if (n == 0) return absl::DeadlineExceededError("timed out");
  return absl::UnavailableError(absl::StrCat("poll: ", base::ErrnoText(errno)));
}

struct AddrInfoDeleter {
  void operator()(addrinfo* a) const { freeaddrinfo(a); }
};

absl::StatusOr<std::unique_ptr<addrinfo, AddrInfoDeleter>> Resolve(
    absl::string_view host, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : AI_ADDRCONFIG;
  addrinfo* result = nullptr;
  const std::string h(host);
  const std::string p = std::to_string(port);
  const int rc = ::getaddrinfo(h.empty() ? nullptr : h.c_str(), p.c_str(),
                               &hints, &result);
  if (rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve '", host, "': ", gai_strerror(rc)));
  }
  return std::unique_ptr<addrinfo, AddrInfoDeleter>(result);
}

}  // namespace

std::string JoinHostPort(absl::string_view host, int port) {
  if (absl::StrContains(host, ':')) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

absl::StatusOr<std::string> LocalAddressToward(absl::string_view host,
                                               int port) {
  DTRAIN_ASSIGN_OR_RETURN(auto addrs, Resolve(host, port, /*passive=*/false));
  std::string last_error = "no usable address";
  for (addrinfo* a = addrs.get(); a != nullptr; a = a->ai_next) {
    base::UniqueFd fd(::socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!fd.valid() || ::connect(fd.get(), a->ai_addr, a->ai_addrlen) != 0) {
      last_error = base::ErrnoText(errno);
      continue;
    }
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    char text[INET6_ADDRSTRLEN] = {};
    if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len) != 0 ||
        ::getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, text, sizeof(text),
                      nullptr, 0, NI_NUMERICHOST) != 0) {
      last_error = base::ErrnoText(errno);
      continue;
    }
    return std::string(text);
  }
  return absl::UnavailableError(
      absl::StrCat("no route to ", JoinHostPort(host, port), ": ", last_error));
}

void SetNonBlocking(int fd) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

void SetNoDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

absl::StatusOr<base::UniqueFd> Listen(absl::string_view host, int port,
                                      int* bound_port) {
  const std::string where = host.empty()
                                ? absl::StrCat("every interface, port ", port)
                                : JoinHostPort(host, port);
  DTRAIN_ASSIGN_OR_RETURN(auto addrs, Resolve(host, port, /*passive=*/true));
  // With no host, try the IPv6 wildcard first (dual-stack, accepts IPv4 too),
  // then the rest (the IPv4 wildcard, for kernels without IPv6).
  std::vector<addrinfo*> order;
  for (addrinfo* a = addrs.get(); a != nullptr; a = a->ai_next) {
    if (host.empty() && a->ai_family == AF_INET6)
      order.insert(order.begin(), a);
    else
      order.push_back(a);
  }
  std::string last_error = "no usable address";
  for (addrinfo* a : order) {
    base::UniqueFd fd(
        ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!fd.valid()) {
      last_error = base::ErrnoText(errno);
      continue;
    }
    int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (a->ai_family == AF_INET6) {
      int zero = 0;
      ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    }
    if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0) {
      if (errno == EADDRINUSE) {
        return absl::UnavailableError(absl::StrCat(
            "cannot listen on ", where, ": ", base::ErrnoText(EADDRINUSE),
            "; is another job (or a run still shutting down) "
            "using it?"));
      }
      last_error = base::ErrnoText(errno);
      continue;
    }
    if (::listen(fd.get(), 1024) != 0) {
      last_error = base::ErrnoText(errno);
      continue;
    }
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len);
    *bound_port = ss.ss_family == AF_INET6
                      ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                      : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    return fd;
  }
  return absl::UnavailableError(
      absl::StrCat("cannot listen on ", where, ": ", last_error));
}

absl::StatusOr<base::UniqueFd> ConnectOnce(absl::string_view host, int port,
                                           absl::Time deadline, bool* refused) {
  if (refused != nullptr) *refused = false;
  DTRAIN_ASSIGN_OR_RETURN(auto addrs, Resolve(host, port, /*passive=*/false));
  std::string last_error = "no usable address";
  bool all_refused = true;
  for (addrinfo* a = addrs.get(); a != nullptr; a = a->ai_next) {
    base::UniqueFd fd(
        ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!fd.valid()) {
      all_refused = false;
      last_error = base::ErrnoText(errno);
      continue;
    }
    SetNonBlocking(fd.get());
    if (::connect(fd.get(), a->ai_addr, a->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        if (errno != ECONNREFUSED) all_refused = false;
        last_error = base::ErrnoText(errno);
        continue;
      }
      absl::Status s = PollFor(fd.get(), POLLOUT, deadline);
      if (!s.ok()) {
        all_refused = false;
        last_error = s.code() == absl::StatusCode::kDeadlineExceeded
                         ? "connection attempt timed out"
                         : std::string(s.message());
        continue;
      }
      int err = 0;
      socklen_t len = sizeof(err);
      ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        if (err != ECONNREFUSED) all_refused = false;
        last_error = base::ErrnoText(err);
        continue;
      }
    }
    // Back to blocking mode: the client does its I/O with poll deadlines.
    ::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) & ~O_NONBLOCK);
    SetNoDelay(fd.get());
    return fd;
  }
  if (refused != nullptr) *refused = all_refused && addrs != nullptr;
  return absl::UnavailableError(last_error);
}

absl::Status SendAll(int fd, const char* data, size_t size,
                     absl::Time deadline) {
  size_t done = 0;
  while (done < size) {
    DTRAIN_RETURN_IF_ERROR(PollFor(fd, POLLOUT, deadline));
    const ssize_t n = base::RetryOnEintr([&] {
      return ::send(fd, data + done, size - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    });
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n < 0 && errno != EAGAIN) {
      return absl::UnavailableError(
          absl::StrCat("send: ", base::ErrnoText(errno)));
    }
  }
  return absl::OkStatus();
}

absl::Status RecvAll(int fd, char* data, size_t size, absl::Time deadline) {
  size_t done = 0;
  while (done < size) {
    DTRAIN_RETURN_IF_ERROR(PollFor(fd, POLLIN, deadline));
    const ssize_t n = base::RetryOnEintr(
        [&] { return ::recv(fd, data + done, size - done, MSG_DONTWAIT); });
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n == 0) {
      return absl::UnavailableError("the server closed the connection");
    } else if (errno != EAGAIN) {
      return absl::UnavailableError(
          absl::StrCat("recv: ", base::ErrnoText(errno)));
    }
  }
  return absl::OkStatus();
}

}  // namespace dtrain::store::internal
