// TcpStore: the Store contract over loopback, plus what only a network store
// can get wrong: ports, unreachable servers, lost servers, hostile clients,
// many ranks and real processes.

#include "dist/store/tcp_store.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <torch/version.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/posix_io.h"
#include "dist/store/store_conformance.h"
#include "dist/store/tcp_socket.h"
#include "dist/store/tcp_store_protocol.h"
#include "dist/store/tcp_store_server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::store {
namespace {

using ::testing::HasSubstr;
using testing::StoreConformanceTest;
using testing::StoreFactory;

std::shared_ptr<TcpStore> StartServer(
    absl::Duration timeout = absl::Seconds(30)) {
  TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.bind_host = "127.0.0.1";
  o.port = 0;
  o.is_server = true;
  o.timeout = timeout;
  absl::StatusOr<std::shared_ptr<TcpStore>> s = TcpStore::Create(o);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : nullptr;
}

absl::StatusOr<std::shared_ptr<TcpStore>> ConnectClient(
    int port, absl::Duration connect_timeout = absl::Seconds(10)) {
  TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.connect_timeout = connect_timeout;
  return TcpStore::Create(o);
}

StoreFactory TcpStoreFactory() {
  return {"TcpStore", [](absl::Duration t) { return StartServer(t); },
          [](Store& first, absl::Duration) -> std::shared_ptr<Store> {
            auto client = ConnectClient(static_cast<TcpStore&>(first).port());
            return client.ok() ? *client : nullptr;
          },
          nullptr};
}

INSTANTIATE_TEST_SUITE_P(Loopback, StoreConformanceTest,
                         ::testing::Values(TcpStoreFactory()),
                         [](const auto& info) { return info.param.name; });

// A port that nothing listens on: bind port 0, read it back, close.
int FreePort() {
  int port = 0;
  absl::StatusOr<base::UniqueFd> fd = internal::Listen("127.0.0.1", 0, &port);
  EXPECT_TRUE(fd.ok());
  return port;
}

TEST(TcpStoreTest, ServerReportsRealPortWhenBoundToZero) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  EXPECT_GT(server->port(), 0);
  EXPECT_EQ(server->server()->port(), server->port());
}

TEST(TcpStoreTest, BusyPortIsAClearError) {
  auto first = StartServer();
  ASSERT_NE(first, nullptr);
  TcpStoreOptions o;
  o.bind_host = "127.0.0.1";
  o.port = first->port();
  o.is_server = true;
  absl::StatusOr<std::shared_ptr<TcpStore>> second = TcpStore::Create(o);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(), HasSubstr("already in use"));
  EXPECT_THAT(second.status().message(),
              HasSubstr(std::to_string(first->port())));
}

TEST(TcpStoreTest, UnreachableServerNamesAddressAndTime) {
  const int port = FreePort();
  const absl::Time start = absl::Now();
  auto client = ConnectClient(port, absl::Milliseconds(300));
  const absl::Duration took = absl::Now() - start;
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(client.status().message(),
              HasSubstr(absl::StrCat("127.0.0.1:", port)));
  EXPECT_THAT(client.status().message(), HasSubstr("300ms"));
  EXPECT_THAT(client.status().message(), HasSubstr("refused"));
  EXPECT_LT(took, absl::Seconds(5));
}

TEST(TcpStoreTest, PortOutOfRangeIsInvalidArgument) {
  TcpStoreOptions o;
  o.port = 70000;
  EXPECT_EQ(TcpStore::Create(o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o.port = 0;  // Only a server may ask for any port.
  EXPECT_EQ(TcpStore::Create(o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TcpStoreTest, ClientStartedBeforeServerConnectsWhenItComes) {
  const int port = FreePort();
  std::thread late_server;
  std::shared_ptr<TcpStore> server;
  late_server = std::thread([&] {
    absl::SleepFor(absl::Milliseconds(300));
    TcpStoreOptions o;
    o.bind_host = "127.0.0.1";
    o.host = "127.0.0.1";
    o.port = port;
    o.is_server = true;
    auto s = TcpStore::Create(o);
    ASSERT_TRUE(s.ok()) << s.status();
    server = *s;
  });
  auto client = ConnectClient(port, absl::Seconds(20));
  late_server.join();
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->Set("k", "v").ok());
  EXPECT_EQ(*server->Get("k"), "v");
}

// A listener that is not a dtrain store server: accepts one connection and
// answers the hello with `reply` (nothing when empty), keeping the connection
// open past the hello's second unless `close_at_once`. The client must give up
// within about a second, saying what it found, however long its own timeout.
absl::Status ConnectToImpostor(const std::string& reply, bool close_at_once) {
  int port = 0;
  absl::StatusOr<base::UniqueFd> listener =
      internal::Listen("127.0.0.1", 0, &port);
  EXPECT_TRUE(listener.ok());
  std::thread impostor([&] {
    base::UniqueFd fd(::accept(listener->get(), nullptr, nullptr));
    if (!fd.valid() || close_at_once) return;
    if (!reply.empty()) (void)!::write(fd.get(), reply.data(), reply.size());
    absl::SleepFor(absl::Milliseconds(1500));  // Past the hello's second.
  });
  const absl::Time start = absl::Now();
  auto client = ConnectClient(port, absl::Seconds(60));
  const absl::Duration took = absl::Now() - start;
  impostor.join();
  EXPECT_FALSE(client.ok());
  EXPECT_LT(took, absl::Seconds(3)) << client.status();
  return client.status();
}

TEST(TcpStoreTest, NonStoreListenerIsRejectedWithinASecond) {
  absl::Status s = ConnectToImpostor("HTTP/1.1 400 Bad Request\r\n\r\n", false);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("is not a dtrain store server: it "
                                     "answered the store's hello with bytes "
                                     "of another protocol (485454502f312e31"));
  EXPECT_THAT(s.message(), HasSubstr("torchrun's own store"));

  s = ConnectToImpostor("", false);
  EXPECT_THAT(s.message(), HasSubstr("it accepted the connection but did not "
                                     "answer the store's hello within 1s"));
  s = ConnectToImpostor("", true);
  EXPECT_THAT(s.message(), HasSubstr("it closed the connection without "
                                     "answering the store's hello"));
}

TEST(TcpStoreTest, AnotherProtocolVersionIsNamed) {
  std::string frame;
  protocol::AppendFrame(static_cast<uint8_t>(protocol::Reply::kOk), "", &frame);
  frame[4] = static_cast<char>(protocol::kVersion + 1);  // The version byte.
  absl::Status s = ConnectToImpostor(frame, false);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(
      s.message(),
      HasSubstr(absl::StrCat("speaks protocol version ", protocol::kVersion + 1,
                             ", this client version ", protocol::kVersion,
                             ": run the same dtrain build on every "
                             "rank")));
}

// torchrun's agent serves a c10d TCPStore on MASTER_PORT: a rank that tries
// the project's protocol there learns it at once.
TEST(TcpStoreTest, C10dServerIsNamedNotWaitedFor) {
  c10d::TCPStoreOptions o;
  o.port = 0;
  o.isServer = true;
  o.waitWorkers = false;
#if TORCH_VERSION_MAJOR > 2 || \
    (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  o.useLibUV = false;
#endif
  c10d::TCPStore agent("127.0.0.1", o);
  const absl::Time start = absl::Now();
  auto client = ConnectClient(agent.getPort(), absl::Seconds(60));
  ASSERT_FALSE(client.ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  EXPECT_EQ(client.status().code(), absl::StatusCode::kFailedPrecondition)
      << client.status();
  EXPECT_THAT(client.status().message(),
              HasSubstr("not a dtrain store server"));
}

TEST(TcpStoreTest, LostServerFailsPendingGetWithUnavailable) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  auto client = ConnectClient(server->port());
  ASSERT_TRUE(client.ok());
  std::thread killer([&] {
    absl::SleepFor(absl::Milliseconds(200));
    server.reset();
  });
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> v = (*client)->Get("never", absl::Seconds(60));
  killer.join();
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(v.status().message(), HasSubstr("get 'never'"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

// After the server went away, a new call finds nothing listening: the client
// reached it before, so it says the server's process has exited instead of
// retrying for the minute of connect_timeout.
TEST(TcpStoreTest, ServerGoneAfterServingIsNamedAtOnce) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  auto client = ConnectClient(server->port(), absl::Seconds(60));
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE((*client)->Set("k", "v").ok());
  server.reset();
  // The pooled connection breaks first; the next call connects anew.
  EXPECT_EQ((*client)->Set("k", "w").code(), absl::StatusCode::kUnavailable);
  absl::Status s = (*client)->Set("k", "w");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("refused the connection after serving"));
}

// Sends raw bytes on a fresh connection and reads whatever comes back until the
// server closes or goes quiet.
void SendRaw(int port, const std::string& bytes, bool half_close) {
  absl::StatusOr<base::UniqueFd> fd =
      internal::ConnectOnce("127.0.0.1", port, absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(fd.ok()) << fd.status();
  (void)internal::SendAll(fd->get(), bytes.data(), bytes.size(),
                          absl::Now() + absl::Seconds(5));
  if (half_close) ::shutdown(fd->get(), SHUT_WR);
  char buf[4096];
  (void)internal::RecvAll(fd->get(), buf, sizeof(buf),
                          absl::Now() + absl::Milliseconds(20));
}

std::string Frame(uint8_t type, const std::string& payload) {
  std::string out;
  protocol::AppendFrame(type, payload, &out);
  return out;
}

TEST(TcpStoreServerTest, HostileClientsDoNotDisturbWellBehavedOnes) {
  auto store = StartServer();
  ASSERT_NE(store, nullptr);
  const int port = store->port();
  auto good = ConnectClient(port);
  ASSERT_TRUE(good.ok());
  ASSERT_TRUE((*good)->Set("before", "1").ok());

  std::string oversized;
  protocol::AppendFrame(2, "", &oversized);
  oversized[8] = oversized[9] = oversized[10] = oversized[11] =
      '\xff';  // 4 GiB claimed.
  const std::vector<std::string> cases = {
      "GET / HTTP/1.1\r\n\r\n",  // Wrong magic.
      oversized,                 // Over the cap.
      Frame(99, ""),             // Unknown request.
      Frame(2,
            protocol::Writer().U32(1000).data()),  // Field longer than frame.
      Frame(7, protocol::Writer().I64(10).U32(1u << 30).data()),  // Absurd key
                                                                  // count.
      Frame(3,
            protocol::Writer().I64(-5).Bytes("k").data()),  // Negative timeout.
      Frame(2, "x").substr(0, 7),                           // Truncated header.
      Frame(2, protocol::Writer().Bytes("k").Bytes("v").data())
          .substr(0, 15),  // Truncated body.
  };
  for (const std::string& c : cases) {
    SendRaw(port, c, /*half_close=*/false);
    SendRaw(port, c, /*half_close=*/true);
  }
  EXPECT_GE(store->server()->protocol_errors(), 2);
  ASSERT_TRUE((*good)->Set("after", "2").ok());
  EXPECT_EQ(*(*good)->Get("before"), "1");
  EXPECT_EQ(*(*good)->Add("n", 1), 1);
}

TEST(TcpStoreServerTest, UnknownRequestKeepsConnectionUsable) {
  auto store = StartServer();
  ASSERT_NE(store, nullptr);
  absl::StatusOr<base::UniqueFd> fd = internal::ConnectOnce(
      "127.0.0.1", store->port(), absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(fd.ok());
  const std::string bytes = Frame(99, "") + Frame(1, "");
  ASSERT_TRUE(internal::SendAll(fd->get(), bytes.data(), bytes.size(),
                                absl::Now() + absl::Seconds(5))
                  .ok());
  for (uint8_t want : {uint8_t{1} /*kInvalid*/, uint8_t{0} /*kOk*/}) {
    char header[protocol::kHeaderSize];
    ASSERT_TRUE(internal::RecvAll(fd->get(), header, sizeof(header),
                                  absl::Now() + absl::Seconds(5))
                    .ok());
    const protocol::Header h = protocol::DecodeHeader(header);
    EXPECT_EQ(h.type, want);
    std::string rest(h.length, '\0');
    ASSERT_TRUE(internal::RecvAll(fd->get(), rest.data(), rest.size(),
                                  absl::Now() + absl::Seconds(5))
                    .ok());
  }
}

// One raw request on a fresh connection, as a stranger would send it: the
// reply's type and message, and whether the server closed the connection.
struct RawReply {
  uint8_t type = 255;
  std::string message;
  bool closed = false;
};

RawReply Raw(int port, const std::string& frames) {
  RawReply out;
  absl::StatusOr<base::UniqueFd> fd =
      internal::ConnectOnce("127.0.0.1", port, absl::Now() + absl::Seconds(5));
  if (!fd.ok()) return out;
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  if (!internal::SendAll(fd->get(), frames.data(), frames.size(), deadline)
           .ok())
    return out;
  char header[protocol::kHeaderSize];
  if (!internal::RecvAll(fd->get(), header, sizeof(header), deadline).ok())
    return out;
  const protocol::Header h = protocol::DecodeHeader(header);
  std::string rest(h.length, '\0');
  if (!internal::RecvAll(fd->get(), rest.data(), rest.size(), deadline).ok())
    return out;
  out.type = h.type;
  protocol::Reader r(rest);
  out.message = std::string(r.Bytes());
  // Closed: end of stream at once; open: nothing more within the wait.
  char byte;
  out.closed = internal::RecvAll(fd->get(), &byte, 1,
                                 absl::Now() + absl::Milliseconds(300))
                   .code() == absl::StatusCode::kUnavailable;
  return out;
}

TEST(TcpStoreTokenTest, StrangersCannotReadWriteOrDelete) {
  TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.bind_host = "127.0.0.1";
  o.port = 0;
  o.is_server = true;
  o.token = "s3cret";
  ::testing::internal::CaptureStderr();
  absl::StatusOr<std::shared_ptr<TcpStore>> job = TcpStore::Create(o);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Set("weights/url", "file:///job").ok());
  const int port = (*job)->port();
  using protocol::Request;
  using protocol::Writer;
  const auto frame = [](Request r, const std::string& payload) {
    return Frame(static_cast<uint8_t>(r), payload);
  };
  const std::string get =
      frame(Request::kGet, Writer().I64(100).Bytes("weights/url").data());
  const std::string set =
      frame(Request::kSet, Writer().Bytes("weights/url").Bytes("evil").data());
  const std::string del =
      frame(Request::kDelete, Writer().Bytes("weights/url").data());
  const std::string hello_without = frame(Request::kPing, "");
  const std::string hello_wrong =
      frame(Request::kPing, Writer().Bytes("guess").data());
  for (const std::string& attempt : {get, set, del, hello_without + get,
                                     hello_wrong + set, hello_wrong + del}) {
    RawReply r = Raw(port, attempt);
    EXPECT_EQ(r.type, static_cast<uint8_t>(protocol::Reply::kProtocol));
    EXPECT_THAT(r.message, HasSubstr("this store needs the job's token"));
    EXPECT_TRUE(r.closed);
  }
  // Nothing was read, written or deleted.
  EXPECT_EQ(*(*job)->Get("weights/url", absl::Seconds(5)), "file:///job");
  // With the token, a raw client gets served.
  RawReply ok =
      Raw(port, frame(Request::kPing, Writer().Bytes("s3cret").data()));
  EXPECT_EQ(ok.type, static_cast<uint8_t>(protocol::Reply::kOk));
  EXPECT_FALSE(ok.closed);

  // The project's client without the token, or with another, is told at once.
  for (const std::string token : {"", "other"}) {
    TcpStoreOptions c;
    c.host = "127.0.0.1";
    c.port = port;
    c.token = token;
    c.connect_timeout = absl::Seconds(60);
    const absl::Time start = absl::Now();
    absl::StatusOr<std::shared_ptr<TcpStore>> stranger = TcpStore::Create(c);
    ASSERT_FALSE(stranger.ok());
    EXPECT_EQ(stranger.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(stranger.status().message(),
                HasSubstr("set DTRAIN_STORE_TOKEN or DTRAIN_STORE_TOKEN_FILE"));
    EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  }
  job->reset();
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(log, HasSubstr("refused a connection from 127.0.0.1:"));
  EXPECT_THAT(log, HasSubstr(": a request before the hello"));
  EXPECT_THAT(log, HasSubstr(": a wrong token"));
  EXPECT_THAT(log, HasSubstr(": no token"));
}

// Random byte streams, random valid-looking frames with corrupted fields, and
// random truncations.
TEST(TcpStoreServerTest, RandomizedGarbageNeverBreaksTheServer) {
  auto store = StartServer();
  ASSERT_NE(store, nullptr);
  const int port = store->port();
  std::mt19937 rng(12345);
  constexpr int kRounds = 300;
  for (int round = 0; round < kRounds; ++round) {
    std::string bytes;
    const int kind = round % 3;
    if (kind == 0) {
      bytes.resize(rng() % 256);
      for (char& b : bytes) b = static_cast<char>(rng());
    } else {
      protocol::Writer w;
      const int fields = rng() % 4;
      for (int i = 0; i < fields; ++i) {
        if (rng() % 2) {
          w.I64(static_cast<int64_t>(rng() % 100));
        } else {
          w.Bytes(std::string(rng() % 16, 'k'));
        }
      }
      bytes = Frame(static_cast<uint8_t>(rng() % 12), w.data());
      if (kind == 2 && !bytes.empty()) {
        bytes[rng() % bytes.size()] =
            static_cast<char>(rng());              // Corrupt one byte.
        bytes.resize(rng() % (bytes.size() + 1));  // Maybe truncate.
      }
    }
    SendRaw(port, bytes, /*half_close=*/rng() % 2 == 0);
  }
  auto good = ConnectClient(port);
  ASSERT_TRUE(good.ok()) << good.status();
  ASSERT_TRUE((*good)->Set("alive", "yes").ok());
  EXPECT_EQ(*(*good)->Get("alive"), "yes");
}

TEST(TcpStoreTest, SixtyFourRanksAsThreadsMeetAtABarrier) {
  constexpr int kRanks = 64;
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  std::atomic<int> failures{0};
  std::vector<std::thread> ranks;
  for (int r = 0; r < kRanks; ++r) {
    ranks.emplace_back([&, r] {
      auto client = ConnectClient(server->port());
      if (!client.ok()) {
        ++failures;
        return;
      }
      if (!(*client)->Set(absl::StrCat("rank/", r), std::to_string(r)).ok())
        ++failures;
      if (!(*client)->Add("joined", 1).ok()) ++failures;
      std::vector<std::string> keys;
      for (int i = 0; i < kRanks; ++i) keys.push_back(absl::StrCat("rank/", i));
      if (!(*client)->Wait(keys, absl::Seconds(30)).ok()) ++failures;
    });
  }
  for (auto& t : ranks) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(*server->Add("joined", 0), kRanks);
}

TEST(TcpStoreTest, RealProcessesShareTheStore) {
  constexpr int kChildren = 4;
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  std::vector<pid_t> children;
  for (int i = 0; i < kChildren; ++i) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // Child: its own client; exit code says what failed.
      alarm(60);  // Never outlive a broken test.
      auto client = ConnectClient(port);
      if (!client.ok()) _exit(10);
      if (!(*client)
               ->Set(absl::StrCat("child/", i), std::to_string(::getpid()))
               .ok())
        _exit(11);
      if (!(*client)->Add("children", 1).ok()) _exit(12);
      std::vector<std::string> keys;
      for (int k = 0; k < kChildren; ++k)
        keys.push_back(absl::StrCat("child/", k));
      if (!(*client)->Wait(keys, absl::Seconds(30)).ok()) _exit(13);
      _exit(0);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "child " << pid << " status " << status;
  }
  EXPECT_EQ(*server->Add("children", 0), kChildren);
}

}  // namespace
}  // namespace dtrain::store
