// Small POSIX socket helpers for the TcpStore server and client: listening,
// connecting with a deadline, and whole-buffer I/O with deadlines. Every error
// names the address and the system's reason. Sockets are owned by
// base::UniqueFd. Functions are thread-safe; one socket is used by one thread
// at a time.
#ifndef DTRAIN_DIST_STORE_TCP_SOCKET_H_
#define DTRAIN_DIST_STORE_TCP_SOCKET_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/posix_io.h"

namespace dtrain::store::internal {

// "host:port", bracketing IPv6 literals.
std::string JoinHostPort(absl::string_view host, int port);

// Binds and listens on host:port (empty host: every interface, IPv6 and IPv4;
// port 0: any free port). Returns the socket; `*bound_port` receives the real
// port. A port in use is kUnavailable saying "Address already in use" and
// asking whether another job uses it.
absl::StatusOr<base::UniqueFd> Listen(absl::string_view host, int port,
                                      int* bound_port);

// One connection attempt to host:port, giving up at `deadline`. kUnavailable on
// refusal or timeout; `refused` (when not null) says whether every address
// refused (nothing listens there).
absl::StatusOr<base::UniqueFd> ConnectOnce(absl::string_view host, int port,
                                           absl::Time deadline,
                                           bool* refused = nullptr);

// Sends or receives exactly `size` bytes on a blocking-mode socket, waiting at
// most until `deadline`. kDeadlineExceeded on timeout, kUnavailable when the
// peer closed or the connection broke.
absl::Status SendAll(int fd, const char* data, size_t size,
                     absl::Time deadline);
absl::Status RecvAll(int fd, char* data, size_t size, absl::Time deadline);

// This machine's address on the route to host:port, as a peer there would
// reach it (a UDP socket's local address after connect; nothing is sent).
// kUnavailable naming host:port when it does not resolve or has no route.
absl::StatusOr<std::string> LocalAddressToward(absl::string_view host,
                                               int port);

void SetNonBlocking(int fd);
void SetNoDelay(int fd);

}  // namespace dtrain::store::internal

#endif  // DTRAIN_DIST_STORE_TCP_SOCKET_H_
