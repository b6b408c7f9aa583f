#include "base/metrics_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/posix_io.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/counter.h"
#include "prometheus/registry.h"

namespace dtrain::trainer {
namespace {

using ::testing::HasSubstr;

// Connects to 127.0.0.1:port; -1 when refused.
base::UniqueFd Connect(int port) {
  base::UniqueFd fd(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0)
    return base::UniqueFd();
  return fd;
}

// GET /metrics over HTTP/1.0: the whole response, "" when nothing answers.
std::string Scrape(int port) {
  base::UniqueFd fd = Connect(port);
  if (!fd.valid()) return "";
  const std::string request =
      "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  if (base::WriteFull(fd.get(), request) != 0) return "";
  std::string response;
  base::ReadToEnd(fd.get(), &response);
  return response;
}

std::shared_ptr<prometheus::Registry> OneCounter(double value) {
  auto registry = std::make_shared<prometheus::Registry>();
  prometheus::BuildCounter()
      .Name("test_things_total")
      .Help("Things.")
      .Register(*registry)
      .Add({{"rank", "0"}})
      .Increment(value);
  return registry;
}

TEST(MetricsServerTest, PortZeroServesOnAFreePortUntilDestroyed) {
  absl::StatusOr<std::unique_ptr<MetricsServer>> server =
      MetricsServer::Start("127.0.0.1", 0, OneCounter(3));
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  EXPECT_GT(port, 0);
  EXPECT_EQ((*server)->url(),
            absl::StrCat("http://127.0.0.1:", port, "/metrics"));
  const std::string response = Scrape(port);
  EXPECT_THAT(response, HasSubstr("200 OK"));
  EXPECT_THAT(response, HasSubstr("test_things_total{rank=\"0\"} 3"));
  server->reset();
  EXPECT_FALSE(Connect(port).valid()) << "port " << port << " still open";
}

TEST(MetricsServerTest, ABusyPortIsNamed) {
  absl::StatusOr<std::unique_ptr<MetricsServer>> first =
      MetricsServer::Start("127.0.0.1", 0, OneCounter(1));
  ASSERT_TRUE(first.ok()) << first.status();
  const int port = (*first)->port();
  absl::StatusOr<std::unique_ptr<MetricsServer>> second =
      MetricsServer::Start("127.0.0.1", port, OneCounter(2));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(),
              HasSubstr(absl::StrCat("127.0.0.1:", port)));
  EXPECT_THAT(second.status().message(), HasSubstr("Address already in use"));
  // The first one still serves its own metrics.
  EXPECT_THAT(Scrape(port), HasSubstr("test_things_total{rank=\"0\"} 1"));
}

// Sends `request` and returns the whole response.
std::string Ask(int port, const std::string& request) {
  base::UniqueFd fd = Connect(port);
  if (!fd.valid() || base::WriteFull(fd.get(), request) != 0) return "";
  std::string response;
  base::ReadToEnd(fd.get(), &response);
  return response;
}

TEST(MetricsServerTest, OtherPathsAndMethodsAreRefused) {
  absl::StatusOr<std::unique_ptr<MetricsServer>> server =
      MetricsServer::Start("127.0.0.1", 0, OneCounter(1));
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  EXPECT_THAT(Ask(port, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
              HasSubstr("404 Not Found"));
  EXPECT_THAT(Ask(port, "POST /metrics HTTP/1.1\r\n\r\n"),
              HasSubstr("405 Method Not Allowed"));
  // Prometheus's scrape: HTTP/1.1 with headers, and a query string is fine.
  const std::string ok =
      Ask(port,
          "GET /metrics?x=1 HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: "
          "text/plain\r\nAccept-Encoding: gzip\r\n\r\n");
  EXPECT_THAT(ok, HasSubstr("200 OK"));
  EXPECT_THAT(ok, HasSubstr("Content-Type: text/plain; version=0.0.4"));
  EXPECT_THAT(ok, HasSubstr("test_things_total{rank=\"0\"} 1"));
}

TEST(MetricsServerTest, ASilentClientDoesNotHoldUpTheEnd) {
  absl::StatusOr<std::unique_ptr<MetricsServer>> server =
      MetricsServer::Start("127.0.0.1", 0, OneCounter(1));
  ASSERT_TRUE(server.ok()) << server.status();
  base::UniqueFd silent = Connect((*server)->port());
  ASSERT_TRUE(silent.valid());
  const absl::Time start = absl::Now();
  server->reset();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

// Whether the server closes `fd` (end of stream) within `wait`.
bool ClosedWithin(int fd, absl::Duration wait) {
  const absl::Time deadline = absl::Now() + wait;
  while (absl::Now() < deadline) {
    pollfd p = {fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buf[256];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return true;
  }
  return false;
}

TEST(MetricsServerTest, IdleStrangersDoNotKeepOutAScrape) {
  absl::StatusOr<std::unique_ptr<MetricsServer>> server =
      MetricsServer::Start("127.0.0.1", 0, OneCounter(3));
  ASSERT_TRUE(server.ok()) << server.status();
  // More than it serves at once; served one at a time, each would hold the
  // scrape up for seconds.
  std::vector<base::UniqueFd> idle;
  for (int i = 0; i < 100; ++i) {
    idle.push_back(Connect((*server)->port()));
    ASSERT_TRUE(idle.back().valid());
  }
  EXPECT_THAT(Scrape((*server)->port()),
              HasSubstr("test_things_total{rank=\"0\"} 3"));
}

TEST(MetricsServerTest, SlowAndOversizedRequestsAreCutOff) {
  absl::StatusOr<std::unique_ptr<MetricsServer>> server =
      MetricsServer::Start("127.0.0.1", 0, OneCounter(1));
  ASSERT_TRUE(server.ok()) << server.status();
  base::UniqueFd big = Connect((*server)->port());
  ASSERT_EQ(base::WriteFull(big.get(), "GET /metrics HTTP/1.0\r\nX: " +
                                           std::string(20000, 'x')),
            0);
  EXPECT_TRUE(ClosedWithin(big.get(), absl::Seconds(30)));
  // One byte every 200 ms never finishes a request within the 5 s allowed.
  base::UniqueFd slow = Connect((*server)->port());
  const absl::Time start = absl::Now();
  bool closed = false;
  while (!closed && absl::Now() - start < absl::Seconds(30)) {
    (void)!::send(slow.get(), "x", 1, MSG_NOSIGNAL);
    closed = ClosedWithin(slow.get(), absl::Milliseconds(200));
  }
  EXPECT_TRUE(closed);
  EXPECT_THAT(Scrape((*server)->port()), HasSubstr("200 OK"));
}

TEST(MetricsServerTest, OutOfDescriptorsTheServerPausesInsteadOfSpinning) {
  absl::StatusOr<std::unique_ptr<MetricsServer>> server =
      MetricsServer::Start("127.0.0.1", 0, OneCounter(1));
  ASSERT_TRUE(server.ok()) << server.status();
  // One socket kept back, every other descriptor taken, then the socket
  // connected: the server has a connection to accept and no descriptor.
  base::UniqueFd spare(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  ASSERT_TRUE(spare.valid());
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  rlimit lowered = saved;
  lowered.rlim_cur = std::min<rlim_t>(4096, saved.rlim_max);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &lowered), 0);
  std::vector<base::UniqueFd> hogs;
  while (true) {
    base::UniqueFd fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) break;
    hogs.push_back(std::move(fd));
  }
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>((*server)->port()));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(spare.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)),
            0);
  const auto cpu = [] {
    rusage r{};
    ::getrusage(RUSAGE_SELF, &r);
    return absl::DurationFromTimeval(r.ru_utime) +
           absl::DurationFromTimeval(r.ru_stime);
  };
  const absl::Duration before = cpu();
  absl::SleepFor(absl::Seconds(1));
  // A spinning loop burns the whole second; pausing, a few polls.
  EXPECT_LT(cpu() - before, absl::Milliseconds(300));
  hogs.clear();
  ::setrlimit(RLIMIT_NOFILE, &saved);
  // With descriptors back, the queued connection is answered.
  const std::string request = "GET /metrics HTTP/1.0\r\n\r\n";
  ASSERT_EQ(base::WriteFull(spare.get(), request), 0);
  std::string response;
  base::ReadToEnd(spare.get(), &response);
  EXPECT_THAT(response, HasSubstr("200 OK"));
}

TEST(MetricsServerTest, BadArgumentsAreRefused) {
  EXPECT_EQ(
      MetricsServer::Start("127.0.0.1", 70000, OneCounter(1)).status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MetricsServer::Start("", 0, OneCounter(1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::unique_ptr<MetricsServer>> nowhere =
      MetricsServer::Start("not-an-address", 0, OneCounter(1));
  ASSERT_FALSE(nowhere.ok());
  EXPECT_THAT(nowhere.status().message(), HasSubstr("not-an-address:0"));
}

}  // namespace
}  // namespace dtrain::trainer
