#include "dist/store/tcp_store_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <list>
#include <set>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/posix_io.h"
#include "dist/store/store_util.h"

namespace dtrain::store::internal {

using protocol::Reader;
using protocol::Reply;
using protocol::Request;
using protocol::Writer;

namespace {

// "10.0.0.2:41234" or "[::1]:41234".
std::string PeerName(const sockaddr_storage& addr) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (addr.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
    ::inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    port = ntohs(a->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
    ::inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    port = ntohs(a->sin6_port);
  }
  return JoinHostPort(host, port);
}

// Compares in time that does not depend on where the strings differ, so that
// timing does not leak the token a byte at a time.
bool TokensEqual(absl::string_view a, absl::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < b.size(); ++i)
    diff |= static_cast<unsigned char>(i < a.size() ? a[i] : 0) ^
            static_cast<unsigned char>(b[i]);
  return diff == 0;
}

// Half of the process's descriptor limit: what the store may hold at most.
int64_t DescriptorBudget() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 ||
      limit.rlim_cur == RLIM_INFINITY) {
    return int64_t{1} << 30;
  }
  return static_cast<int64_t>(limit.rlim_cur / 2);
}

}  // namespace

class TcpStoreServer::Loop {
 public:
  Loop(base::UniqueFd listen, base::UniqueFd wake_read, std::string where,
       const TcpStoreServerOptions& options, int max_pending, int max_clients,
       Counters* counters)
      : listen_(std::move(listen)),
        wake_read_(std::move(wake_read)),
        where_(std::move(where)),
        options_(options),
        max_pending_(max_pending),
        max_clients_(max_clients),
        counters_(counters) {}

  void Run();

 private:
  struct Client {
    base::UniqueFd fd;
    std::string peer;  // "10.0.0.2:41234", for the log.
    std::string in;
    std::string out;
    bool blocked = false;   // a Get/Wait is pending: later frames wait
    bool closing = false;   // close once `out` is flushed
    bool admitted = false;  // Its first frame was accepted.
    absl::Time accepted;    // When the connection was accepted.
  };
  struct Waiter {
    int client_id;
    bool is_get;
    std::vector<std::string> keys;
    absl::Time deadline;
    absl::Duration timeout;
  };

  void Accept();
  // accept4 failed with `error`: makes room or pauses accepting. Returns
  // whether to try accepting again now.
  bool OnAcceptError(int error);
  // Logs a refused client (the first ten, then every thousandth: a flood of
  // strangers must not flood the log too).
  void Refused(const std::string& peer, absl::string_view why);
  // Closes the pending connection `id` at once, telling it why with a frame
  // of `reply` (best effort: a fresh socket's buffer takes it).
  void DropPending(int id, Reply reply, absl::string_view why);
  // Closes pending connections whose hello is overdue.
  void ExpirePending(absl::Time now);
  // Whether this first frame of a pending connection admits it (with a
  // token, only the hello that carries it). Refuses and closes otherwise.
  bool Admit(int id, Client& c, uint8_t type, absl::string_view payload);
  void ReadFrom(int id, Client& c);
  void WriteTo(Client& c);
  void ProcessFrames(int id, Client& c);
  void Handle(int id, Client& c, uint8_t type, absl::string_view payload);
  void SendReply(Client& c, Reply status, absl::string_view payload);
  void SendError(Client& c, Reply status, absl::string_view message);
  bool AllPresent(const std::vector<std::string>& keys) const;
  void AnswerWaiter(const Waiter& w);
  void WakeWaiters();
  void ExpireWaiters(absl::Time now);
  int PollTimeoutMs(absl::Time now) const;

  base::UniqueFd listen_;
  base::UniqueFd wake_read_;
  const std::string where_;
  const TcpStoreServerOptions options_;
  const int max_pending_;
  const int max_clients_;
  Counters* counters_;
  absl::flat_hash_map<std::string, std::string> data_;
  absl::flat_hash_map<int, Client> clients_;
  std::list<Waiter> waiters_;
  // Clients just unblocked whose buffered frames still need serving. Served
  // from the loop rather than inline, so that a long pipeline of requests never
  // deepens the stack.
  std::vector<int> resume_;
  int next_id_ = 0;
  int64_t refused_ = 0;
  // Ids of pending clients; ids grow with time, so the first is the oldest.
  std::set<int> pending_;
  int admitted_ = 0;
  // Out of descriptors: the listening socket is not polled until then.
  absl::Time accept_paused_until_ = absl::InfinitePast();
  absl::Duration accept_pause_ = absl::Milliseconds(50);
};

absl::StatusOr<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Start(
    const TcpStoreServerOptions& options) {
  int port = 0;
  absl::StatusOr<base::UniqueFd> listen =
      Listen(options.host, options.port, &port);
  if (!listen.ok()) {
    return absl::Status(
        listen.status().code(),
        absl::StrCat("store server: ", listen.status().message()));
  }
  SetNonBlocking(listen->get());
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    return absl::InternalError(
        absl::StrCat("store server: pipe: ", base::ErrnoText(errno)));
  }
  std::unique_ptr<TcpStoreServer> server(new TcpStoreServer());
  server->port_ = port;
  const int64_t budget = DescriptorBudget();
  server->max_pending_ = static_cast<int>(
      std::max<int64_t>(1, std::min<int64_t>(options.max_pending, budget / 4)));
  server->max_clients_ = static_cast<int>(std::max<int64_t>(
      1,
      std::min<int64_t>(options.max_clients, budget - server->max_pending_)));
  server->wake_write_ = base::UniqueFd(pipe_fds[1]);
  const std::string where = absl::StrCat(
      "tcp://", JoinHostPort(options.host.empty() ? "*" : options.host, port));
  server->loop_ = std::make_unique<Loop>(
      std::move(*listen), base::UniqueFd(pipe_fds[0]), where, options,
      server->max_pending_, server->max_clients_, &server->counters_);
  server->thread_ = std::thread([loop = server->loop_.get()] { loop->Run(); });
  return server;
}

TcpStoreServer::~TcpStoreServer() {
  if (thread_.joinable()) {
    const char byte = 0;
    // The loop wakes on the pipe and exits; a failed write means it already
    // stopped.
    (void)!::write(wake_write_.get(), &byte, 1);
    thread_.join();
  }
}

void TcpStoreServer::Loop::Run() {
  std::vector<pollfd> fds;
  std::vector<int> ids;
  while (true) {
    fds.clear();
    ids.clear();
    const bool accepting = absl::Now() >= accept_paused_until_;
    fds.push_back({wake_read_.get(), POLLIN, 0});
    fds.push_back(
        {listen_.get(), static_cast<short>(accepting ? POLLIN : 0), 0});
    for (auto& [id, c] : clients_) {
      // POLLRDHUP: a client that hangs up while blocked in Get/Wait is noticed
      // at once. Input is read only while replies are not piling up, which
      // bounds a client's memory on both sides.
      short events = POLLRDHUP;
      if (!c.blocked && !c.closing &&
          c.out.size() <= options_.max_payload_bytes) {
        events |= POLLIN;
      }
      if (!c.out.empty()) events |= POLLOUT;
      fds.push_back({c.fd.get(), events, 0});
      ids.push_back(id);
    }
    const int n = ::poll(fds.data(), fds.size(),
                         resume_.empty() ? PollTimeoutMs(absl::Now()) : 0);
    if (n < 0 && errno != EINTR) return;
    if (fds[0].revents != 0) return;  // Shutdown requested.
    if (fds[1].revents & POLLIN) Accept();
    for (size_t i = 2; i < fds.size(); ++i) {
      const int id = ids[i - 2];
      auto it = clients_.find(id);
      if (it == clients_.end()) continue;
      Client& c = it->second;
      const short rev = fds[i].revents;
      if (rev & POLLOUT) {
        WriteTo(c);
        if (c.out.empty() && !c.in.empty()) resume_.push_back(id);
      }
      if (c.blocked && (rev & (POLLRDHUP | POLLHUP | POLLERR))) {
        c.fd.Reset();  // Gone while waiting: its waiter is dropped below.
      } else if (rev & (POLLIN | POLLHUP | POLLERR | POLLRDHUP)) {
        ReadFrom(id, c);
      }
    }
    ExpireWaiters(absl::Now());
    ExpirePending(absl::Now());
    std::vector<int> resume;
    resume.swap(resume_);
    for (int id : resume) {
      auto it = clients_.find(id);
      if (it != clients_.end() && it->second.fd.valid())
        ProcessFrames(id, it->second);
    }
    // Drop clients that are gone, or done after a protocol error.
    for (auto it = clients_.begin(); it != clients_.end();) {
      Client& c = it->second;
      if (!c.fd.valid() || (c.closing && c.out.empty())) {
        const int id = it->first;
        waiters_.remove_if([id](const Waiter& w) { return w.client_id == id; });
        if (c.admitted) --admitted_;
        pending_.erase(id);
        clients_.erase(it++);
      } else {
        ++it;
      }
    }
  }
}

void TcpStoreServer::Loop::Accept() {
  while (true) {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    const int fd = ::accept4(listen_.get(), reinterpret_cast<sockaddr*>(&addr),
                             &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (OnAcceptError(errno)) continue;
      return;
    }
    accept_pause_ = absl::Milliseconds(50);
    if (static_cast<int>(pending_.size()) >= max_pending_) {
      DropPending(*pending_.begin(), Reply::kRetry,
                  absl::StrCat(max_pending_,
                               " connections are waiting for their hello"));
    }
    SetNoDelay(fd);
    const int id = next_id_++;
    Client& c = clients_[id];
    c.fd = base::UniqueFd(fd);
    c.peer = PeerName(addr);
    c.accepted = absl::Now();
    pending_.insert(id);
    // A client sends its hello as soon as it connects, so it is usually here
    // already: admitted now, it can never be the oldest pending one dropped.
    ReadFrom(id, c);
  }
}

bool TcpStoreServer::Loop::OnAcceptError(int error) {
  switch (error) {
    case EINTR:
    case ECONNABORTED:  // The peer gave up while queued: take the next.
    case EPROTO:
      return true;
    case EMFILE:
    case ENFILE:
    case ENOBUFS:
    case ENOMEM:
      break;
    default:  // EAGAIN (none left), or a transient error: the next poll.
      return false;
  }
  if (!pending_.empty()) {
    DropPending(*pending_.begin(), Reply::kRetry,
                absl::StrCat("the server is out of descriptors (",
                             base::ErrnoText(error), ")"));
    return true;
  }
  // Nothing to give back: the listening socket stays readable, so polling it
  // now would spin. Pause, longer each time, until an accept succeeds.
  counters_->accept_pauses.fetch_add(1);
  accept_paused_until_ = absl::Now() + accept_pause_;
  accept_pause_ = std::min(accept_pause_ * 2, absl::Seconds(1));
  Refused("(not accepted)",
          absl::StrCat("cannot accept: ", base::ErrnoText(error),
                       "; accepting again in ",
                       absl::FormatDuration(accept_pause_)));
  return false;
}

void TcpStoreServer::Loop::DropPending(int id, Reply reply,
                                       absl::string_view why) {
  pending_.erase(id);
  auto it = clients_.find(id);
  if (it == clients_.end()) return;
  Client& c = it->second;
  std::string frame;
  protocol::AppendFrame(
      static_cast<uint8_t>(reply),
      Writer().Bytes(absl::StrCat("store server ", where_, ": ", why)).data(),
      &frame);
  (void)!::send(c.fd.get(), frame.data(), frame.size(), MSG_NOSIGNAL);
  counters_->strangers_dropped.fetch_add(1);
  Refused(c.peer, why);
  c.fd.Reset();  // Erased with the other closed clients.
}

void TcpStoreServer::Loop::ExpirePending(absl::Time now) {
  while (!pending_.empty()) {
    const int id = *pending_.begin();
    auto it = clients_.find(id);
    if (it != clients_.end() &&
        it->second.accepted + options_.hello_timeout > now) {
      return;  // The oldest is not overdue, so neither are the others.
    }
    DropPending(id, Reply::kProtocol,
                absl::StrCat("no hello within ",
                             absl::FormatDuration(options_.hello_timeout),
                             " of connecting"));
  }
}

void TcpStoreServer::Loop::Refused(const std::string& peer,
                                   absl::string_view why) {
  ++refused_;
  if (refused_ > 10 && refused_ % 1000 != 0) return;
  const std::string line =
      absl::StrCat("store server ", where_, ": refused a connection from ",
                   peer, ": ", why, " (", refused_, " refused so far)");
  if (options_.log) {
    options_.log(line);
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
}

bool TcpStoreServer::Loop::Admit(int id, Client& c, uint8_t type,
                                 absl::string_view payload) {
  if (c.admitted) return true;
  std::string why;
  if (options_.token.empty()) {
    // Without a token any well-framed first frame admits the connection.
  } else if (static_cast<Request>(type) != Request::kPing) {
    why = "a request before the hello";
  } else {
    Reader r(payload);
    // An empty payload is a hello without a token.
    const absl::string_view token = payload.empty() ? "" : r.Bytes();
    if (!r.Done()) {
      why = "a malformed hello";
    } else if (!TokensEqual(token, options_.token)) {
      why = token.empty() ? "no token" : "a wrong token";
    }
  }
  if (why.empty() && admitted_ >= max_clients_) {
    // Said, not just closed, so that the client's hello can tell a full
    // server from a foreign one.
    Refused(c.peer, "too many connections");
    SendError(c, Reply::kProtocol,
              absl::StrCat("store server ", where_, ": ", max_clients_,
                           " connections already, the limit"));
    c.closing = true;
    c.in.clear();
    pending_.erase(id);
    return false;
  }
  if (why.empty()) {
    c.admitted = true;
    ++admitted_;
    pending_.erase(id);
    return true;
  }
  Refused(c.peer, why);
  counters_->protocol_errors.fetch_add(1);
  SendError(c, Reply::kProtocol,
            absl::StrCat("store server ", where_,
                         ": this store needs the job's token (", why,
                         "): set DTRAIN_STORE_TOKEN or DTRAIN_STORE_TOKEN_FILE "
                         "to the same secret on every rank"));
  c.closing = true;
  c.in.clear();
  pending_.erase(id);
  return false;
}

void TcpStoreServer::Loop::ReadFrom(int id, Client& c) {
  char buf[64 * 1024];
  while (true) {
    const ssize_t n = ::recv(c.fd.get(), buf, sizeof(buf), 0);
    if (n > 0) {
      c.in.append(buf, static_cast<size_t>(n));
      ProcessFrames(id, c);
      if (c.blocked || c.closing) return;
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    // Peer closed or the connection failed: forget the client.
    c.fd.Reset();
    return;
  }
}

void TcpStoreServer::Loop::WriteTo(Client& c) {
  while (!c.out.empty()) {
    const ssize_t n =
        ::send(c.fd.get(), c.out.data(), c.out.size(), MSG_NOSIGNAL);
    if (n > 0) {
      c.out.erase(0, static_cast<size_t>(n));
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      return;
    } else {
      c.fd.Reset();
      return;
    }
  }
}

void TcpStoreServer::Loop::ProcessFrames(int id, Client& c) {
  while (!c.blocked && !c.closing &&
         c.out.size() <= options_.max_payload_bytes &&
         c.in.size() >= protocol::kHeaderSize) {
    const protocol::Header h = protocol::DecodeHeader(c.in.data());
    std::string problem;
    if (h.magic != protocol::kMagic) {
      problem = "bad magic number: not a dtrain store client";
    } else if (h.version != protocol::kVersion) {
      problem = absl::StrCat("protocol version ", h.version,
                             " is not supported (server speaks ",
                             protocol::kVersion, ")");
    } else if (h.length > options_.max_payload_bytes) {
      problem =
          absl::StrCat("frame of ", h.length, " bytes exceeds the limit of ",
                       options_.max_payload_bytes, " bytes");
    } else if (!c.admitted && h.length > options_.max_hello_bytes) {
      problem = absl::StrCat("frame of ", h.length,
                             " bytes before the hello was accepted exceeds "
                             "the limit of ",
                             options_.max_hello_bytes, " bytes");
    }
    if (!problem.empty()) {
      counters_->protocol_errors.fetch_add(1);
      if (!c.admitted) Refused(c.peer, problem);
      SendError(c, Reply::kProtocol,
                absl::StrCat("store server ", where_, ": ", problem));
      c.closing = true;
      c.in.clear();
      pending_.erase(id);
      return;
    }
    if (c.in.size() < protocol::kHeaderSize + h.length)
      return;  // Wait for the rest.
    const std::string payload = c.in.substr(protocol::kHeaderSize, h.length);
    c.in.erase(0, protocol::kHeaderSize + h.length);
    if (!Admit(id, c, h.type, payload)) return;
    Handle(id, c, h.type, payload);
  }
}

void TcpStoreServer::Loop::SendReply(Client& c, Reply status,
                                     absl::string_view payload) {
  protocol::AppendFrame(static_cast<uint8_t>(status), payload, &c.out);
  WriteTo(c);
}

void TcpStoreServer::Loop::SendError(Client& c, Reply status,
                                     absl::string_view message) {
  SendReply(c, status, Writer().Bytes(message).data());
}

bool TcpStoreServer::Loop::AllPresent(
    const std::vector<std::string>& keys) const {
  return std::all_of(keys.begin(), keys.end(), [this](const std::string& k) {
    return data_.contains(k);
  });
}

void TcpStoreServer::Loop::Handle(int id, Client& c, uint8_t type,
                                  absl::string_view payload) {
  Reader r(payload);
  auto malformed = [&](absl::string_view what) {
    SendError(c, Reply::kInvalid,
              absl::StrCat("store server ", where_, ": malformed ", what,
                           " request"));
  };
  switch (static_cast<Request>(type)) {
    case Request::kPing:
      if (!payload.empty()) (void)r.Bytes();  // The token, checked in Admit.
      if (!r.Done()) return malformed("ping");
      return SendReply(c, Reply::kOk, Writer().Bytes(where_).data());
    case Request::kSet: {
      absl::string_view key = r.Bytes(), value = r.Bytes();
      if (!r.Done()) return malformed("set");
      data_[key] = std::string(value);
      SendReply(c, Reply::kOk, "");
      return WakeWaiters();
    }
    case Request::kGet:
    case Request::kWait: {
      const bool is_get = static_cast<Request>(type) == Request::kGet;
      const int64_t timeout_ms = r.I64();
      std::vector<std::string> keys;
      if (is_get) {
        keys.emplace_back(r.Bytes());
      } else {
        const uint32_t n = r.U32();
        // Each key takes at least 4 bytes: a count larger than that is a lie,
        // not an allocation.
        if (n > payload.size() / 4) return malformed("wait");
        for (uint32_t i = 0; i < n && r.ok(); ++i) keys.emplace_back(r.Bytes());
      }
      if (!r.Done() || timeout_ms < 0)
        return malformed(is_get ? "get" : "wait");
      Waiter w{id, is_get, std::move(keys), absl::InfiniteFuture(),
               absl::Milliseconds(timeout_ms)};
      if (AllPresent(w.keys)) return AnswerWaiter(w);
      w.deadline = absl::Now() + w.timeout;
      c.blocked = true;
      waiters_.push_back(std::move(w));
      return;
    }
    case Request::kAdd: {
      absl::string_view key = r.Bytes();
      const int64_t delta = r.I64();
      if (!r.Done()) return malformed("add");
      auto it = data_.find(key);
      absl::StatusOr<int64_t> sum =
          AddToCounter(key, it == data_.end() ? nullptr : &it->second, delta);
      if (!sum.ok())
        return SendError(c, Reply::kInvalid, sum.status().message());
      data_[key] = std::to_string(*sum);
      SendReply(c, Reply::kOk, Writer().I64(*sum).data());
      return WakeWaiters();
    }
    case Request::kCompareSet: {
      absl::string_view key = r.Bytes(), expected = r.Bytes(),
                        desired = r.Bytes();
      if (!r.Done()) return malformed("compare-set");
      auto it = data_.find(key);
      std::string result;
      if (it == data_.end()) {
        if (expected.empty()) {
          data_[key] = std::string(desired);
          result = std::string(desired);
        }
      } else {
        if (it->second == expected) it->second = std::string(desired);
        result = it->second;
      }
      SendReply(c, Reply::kOk, Writer().Bytes(result).data());
      return WakeWaiters();
    }
    case Request::kCheck: {
      const uint32_t n = r.U32();
      if (n > payload.size() / 4) return malformed("check");
      std::vector<std::string> keys;
      for (uint32_t i = 0; i < n && r.ok(); ++i) keys.emplace_back(r.Bytes());
      if (!r.Done()) return malformed("check");
      return SendReply(c, Reply::kOk,
                       Writer().U8(AllPresent(keys) ? 1 : 0).data());
    }
    case Request::kDelete: {
      absl::string_view key = r.Bytes();
      if (!r.Done()) return malformed("delete");
      const bool existed = data_.erase(key) > 0;
      return SendReply(c, Reply::kOk, Writer().U8(existed ? 1 : 0).data());
    }
    case Request::kNumKeys:
      if (!r.Done()) return malformed("num-keys");
      return SendReply(c, Reply::kOk,
                       Writer().I64(static_cast<int64_t>(data_.size())).data());
  }
  SendError(
      c, Reply::kInvalid,
      absl::StrCat("store server ", where_, ": unknown request type ", type));
}

void TcpStoreServer::Loop::AnswerWaiter(const Waiter& w) {
  auto it = clients_.find(w.client_id);
  if (it == clients_.end()) return;
  Client& c = it->second;
  c.blocked = false;
  if (w.is_get) {
    SendReply(c, Reply::kOk, Writer().Bytes(data_.at(w.keys[0])).data());
  } else {
    SendReply(c, Reply::kOk, "");
  }
  if (!c.in.empty()) resume_.push_back(w.client_id);
}

void TcpStoreServer::Loop::WakeWaiters() {
  // Answering a waiter may process further frames of that client, which may add
  // waiters or wake others: collect the ready ones first, then answer them.
  std::vector<Waiter> ready;
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (AllPresent(it->keys)) {
      ready.push_back(std::move(*it));
      it = waiters_.erase(it);
    } else {
      ++it;
    }
  }
  for (const Waiter& w : ready) AnswerWaiter(w);
}

void TcpStoreServer::Loop::ExpireWaiters(absl::Time now) {
  std::vector<Waiter> expired;
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (it->deadline <= now) {
      expired.push_back(std::move(*it));
      it = waiters_.erase(it);
    } else {
      ++it;
    }
  }
  for (const Waiter& w : expired) {
    auto it = clients_.find(w.client_id);
    if (it == clients_.end()) continue;
    std::vector<std::string> missing;
    for (const std::string& k : w.keys) {
      if (!data_.contains(k)) missing.push_back(k);
    }
    const absl::Status s = KeysTimeoutError(w.is_get ? "get" : "wait", w.keys,
                                            missing, where_, w.timeout);
    it->second.blocked = false;
    SendError(it->second, Reply::kDeadline, s.message());
    if (!it->second.in.empty()) resume_.push_back(w.client_id);
  }
}

int TcpStoreServer::Loop::PollTimeoutMs(absl::Time now) const {
  absl::Time next = absl::InfiniteFuture();
  for (const Waiter& w : waiters_) next = std::min(next, w.deadline);
  if (!pending_.empty()) {
    auto it = clients_.find(*pending_.begin());
    if (it != clients_.end())
      next = std::min(next, it->second.accepted + options_.hello_timeout);
  }
  if (accept_paused_until_ > now) next = std::min(next, accept_paused_until_);
  if (next == absl::InfiniteFuture()) return -1;
  if (next <= now) return 0;
  return static_cast<int>(
      std::min<int64_t>(absl::ToInt64Milliseconds(next - now) + 1, 1 << 30));
}

}  // namespace dtrain::store::internal
