// The TcpStore server against strangers who can reach its port (docs/
// RELIABILITY.md, "Who can reach the store"): idle and slow connections,
// big frames before the hello, floods of connections and a process out of
// descriptors must neither end nor stall the job, and a rank that joins late
// still gets in. Real sockets on loopback, bounded in count.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/posix_io.h"
#include "dist/store/tcp_socket.h"
#include "dist/store/tcp_store.h"
#include "dist/store/tcp_store_protocol.h"
#include "dist/store/tcp_store_server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::store {
namespace {

using internal::TcpStoreServer;
using internal::TcpStoreServerOptions;
using ::testing::HasSubstr;

constexpr char kToken[] = "the-job-secret";

std::unique_ptr<TcpStoreServer> StartServer(TcpStoreServerOptions o) {
  o.host = "127.0.0.1";
  o.token = kToken;
  o.log = [](const std::string&) {};  // Refusals are expected here.
  absl::StatusOr<std::unique_ptr<TcpStoreServer>> s = TcpStoreServer::Start(o);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

absl::StatusOr<std::shared_ptr<TcpStore>> Rank(int port) {
  TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.token = kToken;
  o.connect_timeout = absl::Seconds(30);
  return TcpStore::Create(o);
}

base::UniqueFd Connect(int port) {
  absl::StatusOr<base::UniqueFd> fd =
      internal::ConnectOnce("127.0.0.1", port, absl::Now() + absl::Seconds(10));
  EXPECT_TRUE(fd.ok()) << fd.status();
  return fd.ok() ? std::move(*fd) : base::UniqueFd();
}

// What the server said before closing `fd`: the reply type and message, or
// type 255 when it said nothing by `deadline` (the connection still open).
struct Goodbye {
  uint8_t type = 255;
  std::string message;
  bool closed = false;
};

Goodbye AwaitGoodbye(int fd, absl::Time deadline) {
  Goodbye out;
  char header[protocol::kHeaderSize];
  if (!internal::RecvAll(fd, header, sizeof(header), deadline).ok()) return out;
  const protocol::Header h = protocol::DecodeHeader(header);
  if (h.length > 4096) return out;
  std::string rest(h.length, '\0');
  if (!internal::RecvAll(fd, rest.data(), rest.size(), deadline).ok())
    return out;
  out.type = h.type;
  protocol::Reader r(rest);
  out.message = std::string(r.Bytes());
  char byte;
  out.closed = internal::RecvAll(fd, &byte, 1, deadline).code() ==
               absl::StatusCode::kUnavailable;
  return out;
}

std::string Hello(absl::string_view token) {
  std::string frame;
  protocol::AppendFrame(static_cast<uint8_t>(protocol::Request::kPing),
                        protocol::Writer().Bytes(token).data(), &frame);
  return frame;
}

// Sets RLIMIT_NOFILE's soft limit for one test and puts it back afterwards.
class OpenFileLimit {
 public:
  explicit OpenFileLimit(rlim_t soft) {
    ::getrlimit(RLIMIT_NOFILE, &saved_);
    rlimit lowered = saved_;
    lowered.rlim_cur = std::min(soft, saved_.rlim_max);
    ok_ = ::setrlimit(RLIMIT_NOFILE, &lowered) == 0;
  }
  ~OpenFileLimit() { ::setrlimit(RLIMIT_NOFILE, &saved_); }
  bool ok() const { return ok_; }
  rlim_t hard() const { return saved_.rlim_max; }

 private:
  rlimit saved_{};
  bool ok_ = false;
};

TEST(TcpStoreStrangersTest, IdleAndSlowConnectionsAreClosedAtTheHelloDeadline) {
  TcpStoreServerOptions o;
  o.hello_timeout = absl::Milliseconds(300);
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  std::vector<base::UniqueFd> idle;
  for (int i = 0; i < 20; ++i) idle.push_back(Connect(server->port()));
  // One byte of a valid hello every 100 ms: never done within 300 ms.
  base::UniqueFd slow = Connect(server->port());
  const std::string hello = Hello(kToken);
  bool slow_cut_off = false;
  for (size_t i = 0; i < hello.size(); ++i) {
    if (::send(slow.get(), &hello[i], 1, MSG_NOSIGNAL) != 1) {
      slow_cut_off = true;
      break;
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  for (const base::UniqueFd& fd : idle) {
    const Goodbye g = AwaitGoodbye(fd.get(), deadline);
    EXPECT_EQ(g.type, static_cast<uint8_t>(protocol::Reply::kProtocol));
    EXPECT_THAT(g.message, HasSubstr("no hello within 300ms of connecting"));
    EXPECT_TRUE(g.closed);
  }
  if (!slow_cut_off) {
    const Goodbye g = AwaitGoodbye(slow.get(), deadline);
    EXPECT_THAT(g.message, HasSubstr("no hello within"));
  }
  EXPECT_GE(server->strangers_dropped(), 21);
  // The job's ranks are served as before.
  absl::StatusOr<std::shared_ptr<TcpStore>> rank = Rank(server->port());
  ASSERT_TRUE(rank.ok()) << rank.status();
  EXPECT_TRUE((*rank)->Set("k", "v").ok());
}

TEST(TcpStoreStrangersTest, ABigFrameBeforeTheHelloIsRefusedByItsHeader) {
  auto server = StartServer({});
  ASSERT_NE(server, nullptr);
  base::UniqueFd fd = Connect(server->port());
  // A hello that claims 64 MiB: only its 12-byte header is sent, so a server
  // that waited for the payload before checking would never answer.
  std::string header = Hello(std::string(100, 't')).substr(0, 12);
  const uint32_t claimed = 64u << 20;
  std::memcpy(&header[8], &claimed, 4);
  ASSERT_TRUE(internal::SendAll(fd.get(), header.data(), header.size(),
                                absl::Now() + absl::Seconds(5))
                  .ok());
  const Goodbye g = AwaitGoodbye(fd.get(), absl::Now() + absl::Seconds(30));
  EXPECT_EQ(g.type, static_cast<uint8_t>(protocol::Reply::kProtocol));
  EXPECT_THAT(g.message, HasSubstr("frame of 67108864 bytes before the hello "
                                   "was accepted exceeds the limit of 4096"));
  EXPECT_TRUE(g.closed);
}

TEST(TcpStoreStrangersTest, ALateRankJoinsWhileThousandsOfStrangersConnect) {
  // More strangers than the old limit on connections (4096) ever allowed.
  constexpr int kStrangers = 4200;
  OpenFileLimit limit(RLIM_INFINITY);
  if (limit.hard() < 2 * kStrangers) {
    GTEST_SKIP() << "needs a descriptor limit of " << 2 * kStrangers
                 << ", this process's hard limit is " << limit.hard();
  }
  TcpStoreServerOptions o;
  o.hello_timeout = absl::Minutes(10);  // Only the cap can help here.
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  absl::StatusOr<std::shared_ptr<TcpStore>> early = Rank(server->port());
  ASSERT_TRUE(early.ok()) << early.status();
  std::vector<base::UniqueFd> strangers;
  for (int i = 0; i < kStrangers; ++i)
    strangers.push_back(Connect(server->port()));
  absl::StatusOr<std::shared_ptr<TcpStore>> late = Rank(server->port());
  ASSERT_TRUE(late.ok()) << late.status();
  ASSERT_TRUE((*late)->Set("late", "joined").ok());
  EXPECT_EQ(*(*early)->Get("late", absl::Seconds(10)), "joined");
  // The server held at most its pending cap of them; the others were told to
  // retry and closed.
  EXPECT_GE(server->strangers_dropped(), kStrangers - server->max_pending());
}

TEST(TcpStoreStrangersTest, TheStoreHoldsAtMostHalfTheDescriptorLimit) {
  OpenFileLimit limit(512);
  ASSERT_TRUE(limit.ok());
  auto server = StartServer({});
  ASSERT_NE(server, nullptr);
  EXPECT_LE(server->max_pending(), 512 / 8);
  EXPECT_LE(server->max_pending() + server->max_clients(), 512 / 2);
}

TEST(TcpStoreStrangersTest, OutOfDescriptorsTheServerPausesInsteadOfSpinning) {
  auto server = StartServer({});
  ASSERT_NE(server, nullptr);
  // A rank connected before the descriptors run out.
  absl::StatusOr<std::shared_ptr<TcpStore>> rank = Rank(server->port());
  ASSERT_TRUE(rank.ok()) << rank.status();
  // One socket kept back, then every other descriptor taken, then the socket
  // connected: the server has a connection to accept and no descriptor for it
  // (and no pending stranger to close).
  const int spare = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(spare, 0);
  base::UniqueFd spare_owner(spare);
  OpenFileLimit limit(4096);
  ASSERT_TRUE(limit.ok());
  std::vector<base::UniqueFd> hogs;
  while (true) {
    const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0) break;
    hogs.emplace_back(fd);
  }
  ASSERT_EQ(errno, EMFILE);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(server->port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(spare, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)),
            0);
  rusage before{};
  ::getrusage(RUSAGE_SELF, &before);
  absl::SleepFor(absl::Seconds(1));
  rusage after{};
  ::getrusage(RUSAGE_SELF, &after);
  const auto cpu = [](const rusage& r) {
    return absl::DurationFromTimeval(r.ru_utime) +
           absl::DurationFromTimeval(r.ru_stime);
  };
  // A spinning loop burns the whole second; pausing, a few polls.
  EXPECT_LT(cpu(after) - cpu(before), absl::Milliseconds(300));
  EXPECT_GE(server->accept_pauses(), 1);
  EXPECT_LE(server->accept_pauses(), 10);
  hogs.clear();
  // With descriptors back, the queued connection is served.
  const std::string hello = Hello(kToken);
  ASSERT_TRUE(internal::SendAll(spare, hello.data(), hello.size(),
                                absl::Now() + absl::Seconds(5))
                  .ok());
  char header[protocol::kHeaderSize];
  ASSERT_TRUE(internal::RecvAll(spare, header, sizeof(header),
                                absl::Now() + absl::Seconds(30))
                  .ok());
  EXPECT_EQ(protocol::DecodeHeader(header).type,
            static_cast<uint8_t>(protocol::Reply::kOk));
  EXPECT_TRUE((*rank)->Set("still", "serving").ok());
}

TEST(TcpStoreStrangersTest, ATooLongTokenIsRefusedByName) {
  TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = 1;
  o.token = std::string(protocol::kMaxTokenBytes + 1, 'x');
  absl::StatusOr<std::shared_ptr<TcpStore>> s = TcpStore::Create(o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("the store token is 1025 bytes"));
}

}  // namespace
}  // namespace dtrain::store
