// The failover store: the Store contract over a rank's standby server; the
// lowest endpoint that answers is chosen, skipping one whose process is gone
// (refused) and one that accepts but does not answer (stopped), each for good;
// a failover starts from an empty server and never silently retries a call
// there; with real processes SIGKILLed and SIGSTOPped.

#include "dist/store/failover_store.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/posix_io.h"
#include "dist/store/store_conformance.h"
#include "dist/store/tcp_socket.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::store {
namespace {

using ::testing::HasSubstr;
using testing::StoreConformanceTest;
using testing::StoreFactory;

FailoverStoreOptions Quick() {
  FailoverStoreOptions o;
  o.probe_timeout = absl::Seconds(1);
  o.client.timeout = absl::Seconds(5);
  return o;
}

StoreFactory FailoverFactory() {
  // Where the first handle's server listens, for the further handles.
  auto endpoint = std::make_shared<StoreEndpoint>();
  return {"FailoverStore",
          [endpoint](absl::Duration timeout) -> std::shared_ptr<Store> {
            absl::StatusOr<std::unique_ptr<StoreStandby>> standby =
                StoreStandby::Start({});
            if (!standby.ok()) return nullptr;
            *endpoint = (*standby)->endpoint();
            FailoverStoreOptions o = Quick();
            o.client.timeout = timeout;
            absl::StatusOr<std::shared_ptr<FailoverStore>> store =
                FailoverStore::Create({*endpoint}, o);
            if (!store.ok()) return nullptr;
            // The first handle keeps the server alive.
            std::shared_ptr<StoreStandby> server = *std::move(standby);
            std::shared_ptr<FailoverStore> client = *std::move(store);
            return std::shared_ptr<Store>(client.get(),
                                          [client, server](Store*) {});
          },
          [endpoint](Store&, absl::Duration timeout) -> std::shared_ptr<Store> {
            FailoverStoreOptions o = Quick();
            o.client.timeout = timeout;
            absl::StatusOr<std::shared_ptr<FailoverStore>> store =
                FailoverStore::Create({*endpoint}, o);
            return store.ok() ? *store : nullptr;
          },
          nullptr};
}

INSTANTIATE_TEST_SUITE_P(Standby, StoreConformanceTest,
                         ::testing::Values(FailoverFactory()),
                         [](const auto& info) { return info.param.name; });

// Endpoints of standbys started here, which the tests stop by destroying.
struct Standbys {
  std::vector<std::unique_ptr<StoreStandby>> servers;
  std::vector<StoreEndpoint> endpoints;
};
Standbys StartStandbys(int n) {
  Standbys s;
  for (int i = 0; i < n; ++i) {
    absl::StatusOr<std::unique_ptr<StoreStandby>> standby =
        StoreStandby::Start({});
    EXPECT_TRUE(standby.ok()) << standby.status();
    s.endpoints.push_back((*standby)->endpoint());
    s.servers.push_back(*std::move(standby));
  }
  return s;
}

TEST(FailoverStoreTest, UsesTheFirstEndpointThatAnswers) {
  Standbys s = StartStandbys(3);
  absl::StatusOr<std::shared_ptr<FailoverStore>> a =
      FailoverStore::Create(s.endpoints, Quick());
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ((*a)->serving(), 0);
  ASSERT_TRUE((*a)->Set("k", "v").ok());
  absl::StatusOr<std::shared_ptr<FailoverStore>> b =
      FailoverStore::Create(s.endpoints, Quick());
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*(*b)->Get("k", absl::Seconds(1)), "v");
  EXPECT_EQ((*b)->Describe(),
            absl::StrCat("tcp://", s.endpoints[0].ToString()));
}

// The server's process is gone: calls fail, never retried elsewhere; after
// Failover every client is at the next server, which starts empty.
TEST(FailoverStoreTest, GoneServerIsReplacedByTheNextEmptyOne) {
  Standbys s = StartStandbys(3);
  std::shared_ptr<FailoverStore> a =
      *FailoverStore::Create(s.endpoints, Quick());
  std::shared_ptr<FailoverStore> b =
      *FailoverStore::Create(s.endpoints, Quick());
  ASSERT_TRUE(a->Set("old", "1").ok());
  s.servers[0].reset();
  const absl::Status lost = a->Set("new", "2");
  EXPECT_EQ(lost.code(), absl::StatusCode::kUnavailable) << lost;
  ASSERT_EQ(*a->Failover(), 1);
  ASSERT_EQ(*b->Failover(), 1);
  EXPECT_EQ(a->Get("old", absl::Milliseconds(100)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(a->Set("new", "2").ok());
  EXPECT_EQ(*b->Get("new", absl::Seconds(1)), "2");
  // A client that starts now skips the gone one too.
  std::shared_ptr<FailoverStore> c =
      *FailoverStore::Create(s.endpoints, Quick());
  EXPECT_EQ(c->serving(), 1);
}

// Something that accepts connections but never answers (a stopped process,
// whose kernel still accepts) is skipped after the probe timeout, for good.
TEST(FailoverStoreTest, SilentEndpointIsSkippedForGood) {
  int port = 0;
  absl::StatusOr<base::UniqueFd> silent =
      internal::Listen("127.0.0.1", 0, &port);
  ASSERT_TRUE(silent.ok()) << silent.status();
  Standbys s = StartStandbys(1);
  std::vector<StoreEndpoint> endpoints = {{"127.0.0.1", port}, s.endpoints[0]};
  std::shared_ptr<FailoverStore> store =
      *FailoverStore::Create(endpoints, Quick());
  EXPECT_EQ(store->serving(), 1);
  EXPECT_EQ(*store->Failover(), 1);
}

TEST(FailoverStoreTest, NoServerAnsweringNamesEachEndpoint) {
  int port = 0;
  absl::StatusOr<base::UniqueFd> silent =
      internal::Listen("127.0.0.1", 0, &port);
  ASSERT_TRUE(silent.ok()) << silent.status();
  Standbys s = StartStandbys(1);
  const StoreEndpoint gone = s.endpoints[0];
  s.servers.clear();
  absl::StatusOr<std::shared_ptr<FailoverStore>> store =
      FailoverStore::Create({gone, {"127.0.0.1", port}}, Quick());
  ASSERT_EQ(store.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(store.status().message()),
              HasSubstr("no store server of the job answers"));
  EXPECT_THAT(std::string(store.status().message()),
              HasSubstr(gone.ToString()));
  EXPECT_THAT(std::string(store.status().message()),
              HasSubstr(absl::StrCat("127.0.0.1:", port)));
  EXPECT_EQ(FailoverStore::Create({}, Quick()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(FailoverStoreTest, EndpointsParseBack) {
  for (const StoreEndpoint& e : std::vector<StoreEndpoint>{
           {"127.0.0.1", 29500}, {"node-3.cluster", 1}, {"::1", 65535}}) {
    absl::StatusOr<StoreEndpoint> back = StoreEndpoint::Parse(e.ToString());
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->host, e.host);
    EXPECT_EQ(back->port, e.port);
  }
  for (const char* bad : {"", "host", "host:", ":80", "h:0", "h:70000", "h:x"})
    EXPECT_FALSE(StoreEndpoint::Parse(bad).ok()) << bad;
}

TEST(FailoverStoreTest, StandbyServesWhereTheOtherHostsReachIt) {
  // A job on one host: loopback, whatever loopback name the master has.
  for (const char* master : {"127.0.0.1", "127.0.1.1", "localhost", "::1", ""})
    EXPECT_EQ(*StandbyHostToward(master, 29500), "127.0.0.1") << master;
  // Otherwise the address on the route to the master: here, through lo.
  EXPECT_EQ(*internal::LocalAddressToward("127.0.0.1", 29500), "127.0.0.1");
  absl::StatusOr<std::string> none =
      StandbyHostToward("no-such-host.invalid", 29500);
  EXPECT_TRUE(absl::IsUnavailable(none.status()));
  EXPECT_THAT(none.status().message(), HasSubstr("no-such-host.invalid"));
}

TEST(FailoverStoreTest, ProbeTellsServingGoneAndSilentApart) {
  Standbys s = StartStandbys(2);
  int port = 0;
  absl::StatusOr<base::UniqueFd> silent =
      internal::Listen("127.0.0.1", 0, &port);
  ASSERT_TRUE(silent.ok()) << silent.status();
  EXPECT_EQ(ProbeEndpoint(s.endpoints[0], Quick()), EndpointState::kServing);
  const StoreEndpoint gone = s.endpoints[1];
  s.servers[1].reset();
  std::string why;
  EXPECT_EQ(ProbeEndpoint(gone, Quick(), &why), EndpointState::kGone);
  EXPECT_THAT(why, HasSubstr("refused"));
  EXPECT_EQ(ProbeEndpoint({"127.0.0.1", port}, Quick(), &why),
            EndpointState::kSilent);
  EXPECT_FALSE(why.empty());
}

// A child process serving a standby, which reports its port and waits to be
// killed.
struct Child {
  pid_t pid = -1;
  StoreEndpoint endpoint;
};
Child StartChild() {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    absl::StatusOr<std::unique_ptr<StoreStandby>> standby =
        StoreStandby::Start({});
    const int port = standby.ok() ? (*standby)->endpoint().port : -1;
    (void)!::write(fds[1], &port, sizeof(port));
    ::close(fds[1]);
    while (true) ::pause();
  }
  ::close(fds[1]);
  int port = -1;
  EXPECT_EQ(::read(fds[0], &port, sizeof(port)),
            static_cast<ssize_t>(sizeof(port)));
  ::close(fds[0]);
  return {pid, {"127.0.0.1", port}};
}

TEST(FailoverStoreTest, KilledAndStoppedProcessesAreSkipped) {
  std::vector<Child> children;
  std::vector<StoreEndpoint> endpoints;
  for (int i = 0; i < 3; ++i) {
    children.push_back(StartChild());
    endpoints.push_back(children.back().endpoint);
  }
  std::shared_ptr<FailoverStore> store =
      *FailoverStore::Create(endpoints, Quick());
  EXPECT_EQ(store->serving(), 0);
  ASSERT_TRUE(store->Set("k", "0").ok());

  ASSERT_EQ(::kill(children[0].pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(children[0].pid, &status, 0), children[0].pid);
  EXPECT_EQ(store->Set("k", "1").code(), absl::StatusCode::kUnavailable);
  ASSERT_EQ(*store->Failover(), 1);
  ASSERT_TRUE(store->Set("k", "1").ok());

  ASSERT_EQ(::kill(children[1].pid, SIGSTOP), 0);
  // A signal is delivered asynchronously: wait until the child has stopped.
  ASSERT_EQ(::waitpid(children[1].pid, &status, WUNTRACED), children[1].pid);
  ASSERT_TRUE(WIFSTOPPED(status));
  ASSERT_EQ(*store->Failover(), 2);
  ASSERT_TRUE(store->Set("k", "2").ok());
  // Resumed, it does not take the store back.
  ASSERT_EQ(::kill(children[1].pid, SIGCONT), 0);
  ASSERT_EQ(::waitpid(children[1].pid, &status, WCONTINUED), children[1].pid);
  ASSERT_TRUE(WIFCONTINUED(status));
  EXPECT_EQ(*store->Failover(), 2);
  EXPECT_EQ(*store->Get("k", absl::Seconds(1)), "2");

  for (size_t i = 1; i < children.size(); ++i) {
    ::kill(children[i].pid, SIGKILL);
    ::waitpid(children[i].pid, &status, 0);
  }
}

// With unresponsive_after, a call to a stopped process's server fails that
// long past its own wait, not after the client's (long) timeout: how an
// elastic job leaves a stopped rank 0's store within seconds.
TEST(FailoverStoreTest, StoppedServerFailsACallSoonWithUnresponsiveAfter) {
  Child child = StartChild();
  FailoverStoreOptions o = Quick();
  o.client.timeout = absl::Minutes(5);
  o.client.unresponsive_after = absl::Milliseconds(500);
  // Two clients: a failed call leaves its client for Failover to choose again.
  std::shared_ptr<FailoverStore> setter =
      *FailoverStore::Create({child.endpoint}, o);
  std::shared_ptr<FailoverStore> getter =
      *FailoverStore::Create({child.endpoint}, o);
  ASSERT_TRUE(setter->Set("k", "0").ok());
  ASSERT_TRUE(getter->Get("k", absl::Seconds(1)).ok());
  ASSERT_EQ(::kill(child.pid, SIGSTOP), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child.pid, &status, WUNTRACED), child.pid);
  absl::Time start = absl::Now();
  absl::Status set = setter->Set("k", "1");
  absl::Duration took = absl::Now() - start;
  EXPECT_EQ(set.code(), absl::StatusCode::kUnavailable) << set;
  EXPECT_THAT(set.message(), HasSubstr("stopped answering"));
  EXPECT_GE(took, absl::Milliseconds(450));
  EXPECT_LT(took, absl::Seconds(3));
  // A Get waits its own timeout first.
  start = absl::Now();
  absl::StatusOr<std::string> get = getter->Get("absent", absl::Seconds(1));
  took = absl::Now() - start;
  EXPECT_EQ(get.status().code(), absl::StatusCode::kUnavailable)
      << get.status();
  EXPECT_GE(took, absl::Milliseconds(1450));
  EXPECT_LT(took, absl::Seconds(4));
  ::kill(child.pid, SIGKILL);
  ::waitpid(child.pid, &status, 0);
}

}  // namespace
}  // namespace dtrain::store
