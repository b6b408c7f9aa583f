// InitWorld end to end with ranks as threads: each init method under the launch
// environments users have, and the startup mistakes that must end in a clear
// error rather than a hang.

#include "dist/rendezvous/init.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <torch/version.h>

#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/posix_io.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::rendezvous {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Listens on 127.0.0.1:`port` (0: a free port) while it lives, as another
// program would. port() is the port held, or 0 when it could not be bound.
class HeldPort {
 public:
  explicit HeldPort(int port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    socklen_t len = sizeof(addr);
    auto* sa = reinterpret_cast<sockaddr*>(&addr);
    if (fd_.valid() && ::bind(fd_.get(), sa, sizeof(addr)) == 0 &&
        ::listen(fd_.get(), 1) == 0 &&
        ::getsockname(fd_.get(), sa, &len) == 0) {
      port_ = ntohs(addr.sin_port);
    }
  }

  int port() const { return port_; }

 private:
  const base::UniqueFd fd_;
  int port_ = 0;
};

// A port that nothing listens on: held for a moment, then released.
int FreePort() {
  const int port = HeldPort(0).port();
  EXPECT_NE(port, 0);
  return port;
}

// Runs InitWorld for ranks 0..n-1 on threads, with the options and environment
// `make` gives each.
std::vector<absl::StatusOr<World>> RunRanks(
    int n, const std::function<std::pair<InitOptions, EnvMap>(int)>& make) {
  std::vector<absl::StatusOr<World>> worlds(n, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto [options, env] = make(r);
      worlds[r] = InitWorld(options, env);
    });
  }
  for (auto& t : threads) t.join();
  return worlds;
}

void ExpectConsistentWorld(const std::vector<absl::StatusOr<World>>& worlds) {
  const int n = static_cast<int>(worlds.size());
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(worlds[r].ok()) << worlds[r].status();
    EXPECT_EQ(worlds[r]->rank, r);
    EXPECT_EQ(worlds[r]->world_size, n);
    ASSERT_EQ(worlds[r]->peers.size(), static_cast<size_t>(n));
    EXPECT_NE(worlds[r]->store, nullptr);
    // What a backend is created for: the world's, with the timeout asked.
    const backend::Membership m = worlds[r]->membership(absl::Seconds(7));
    EXPECT_EQ(m.rank, r);
    EXPECT_EQ(m.world_size, n);
    EXPECT_EQ(m.store, worlds[r]->store);
    EXPECT_EQ(m.timeout, absl::Seconds(7));
    EXPECT_TRUE(m.Check("test").ok());
  }
}

TEST(InitWorldTest, EnvInitMethodWithTorchrunVariables) {
  const std::string port = std::to_string(FreePort());
  auto worlds = RunRanks(4, [&](int r) {
    InitOptions o;
    o.url = "env://";
    o.timeout = absl::Seconds(30);
    EnvMap env = {{"RANK", std::to_string(r)},       {"WORLD_SIZE", "4"},
                  {"LOCAL_RANK", std::to_string(r)}, {"LOCAL_WORLD_SIZE", "4"},
                  {"MASTER_ADDR", "127.0.0.1"},      {"MASTER_PORT", port}};
    return std::make_pair(o, env);
  });
  ExpectConsistentWorld(worlds);
  EXPECT_EQ(worlds[2]->launch.source, LaunchSource::kTorchrun);
  // The job's store works across ranks after the rendezvous.
  ASSERT_TRUE(worlds[1]->store->Set("hello", "from 1").ok());
  EXPECT_EQ(*worlds[3]->store->Get("hello"), "from 1");
}

// torchrun's default mode: its agent serves a c10d store on MASTER_PORT and
// says so with TORCHELASTIC_USE_AGENT_STORE=True. No rank may listen there
// (rank 0 would find the port taken); all meet through the agent's store, in
// a namespace per restart.
TEST(InitWorldTest, EnvInitMethodUnderTorchrunsAgentStore) {
  c10d::TCPStoreOptions agent_options;
  agent_options.port = 0;
  agent_options.isServer = true;
  agent_options.waitWorkers = false;
  agent_options.multiTenant = true;
#if TORCH_VERSION_MAJOR > 2 || \
    (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  agent_options.useLibUV = false;
#endif
  c10d::TCPStore agent("127.0.0.1", agent_options);
  const std::string port = std::to_string(agent.getPort());
  for (const std::string restart : {"0", "1"}) {
    auto worlds = RunRanks(2, [&](int r) {
      InitOptions o;
      o.url = "env://";
      o.timeout = absl::Seconds(30);
      EnvMap env = {{"RANK", std::to_string(r)},
                    {"WORLD_SIZE", "2"},
                    {"MASTER_ADDR", "127.0.0.1"},
                    {"MASTER_PORT", port},
                    {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                    {"TORCHELASTIC_RESTART_COUNT", restart}};
      return std::make_pair(o, env);
    });
    ExpectConsistentWorld(worlds);
    EXPECT_TRUE(worlds[0]->launch.agent_store);
    EXPECT_THAT(worlds[0]->store->Describe(), HasSubstr("c10d tcp://"));
    ASSERT_TRUE(worlds[0]->store->Set("hello", "from 0").ok());
    EXPECT_EQ(*worlds[1]->store->Get("hello"), "from 0");
  }
  // Each attempt's keys live under its own prefix in the agent's store.
  EXPECT_TRUE(agent.check({"dtrain/attempt_0/job/hello"}));
  EXPECT_TRUE(agent.check({"dtrain/attempt_1/job/hello"}));
}

TEST(InitWorldTest, EnvInitMethodUnderSlurmTakesMasterFromNodeList) {
  const std::string port = std::to_string(FreePort());
  auto worlds = RunRanks(3, [&](int r) {
    InitOptions o;
    o.url = "env://";
    o.timeout = absl::Seconds(30);
    EnvMap env = {{"SLURM_PROCID", std::to_string(r)},
                  {"SLURM_NTASKS", "3"},
                  {"SLURM_LOCALID", std::to_string(r)},
                  {"SLURM_NODEID", "0"},
                  {"SLURM_TASKS_PER_NODE", "3"},
                  {"SLURM_JOB_NODELIST", "127.0.0.1"},
                  {"MASTER_PORT", port}};
    return std::make_pair(o, env);
  });
  ExpectConsistentWorld(worlds);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(worlds[r]->launch.source, LaunchSource::kSlurm);
    EXPECT_EQ(worlds[r]->local_rank, r);
    EXPECT_EQ(worlds[r]->local_world_size, 3);
    EXPECT_EQ(worlds[r]->launch.master_addr, "127.0.0.1");
    EXPECT_EQ(worlds[r]->launch.master_addr_from, "SLURM_JOB_NODELIST");
  }
}

TEST(InitWorldTest, EnvInitMethodUnderOpenMpiWithMasterVariables) {
  const std::string port = std::to_string(FreePort());
  auto worlds = RunRanks(3, [&](int r) {
    InitOptions o;
    o.url = "env://";
    o.timeout = absl::Seconds(30);
    EnvMap env = {{"OMPI_COMM_WORLD_RANK", std::to_string(r)},
                  {"OMPI_COMM_WORLD_SIZE", "3"},
                  {"OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(r)},
                  {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"},
                  {"MASTER_ADDR", "127.0.0.1"},
                  {"MASTER_PORT", port}};
    return std::make_pair(o, env);
  });
  ExpectConsistentWorld(worlds);
  EXPECT_EQ(worlds[1]->launch.source, LaunchSource::kOpenMpi);
  EXPECT_EQ(worlds[1]->launch.master_port, std::stoi(port));
}

TEST(InitWorldTest, EnvInitMethodWithoutVariablesIsSingleProcess) {
  InitOptions o;
  o.url = "env://";
  o.timeout = absl::Seconds(30);
  // A single process opens no port: the default 29500, held here by
  // another "job", does not matter.
  absl::StatusOr<World> w;
  {
    const HeldPort held(29500);
    if (held.port() == 0) {
      std::printf("(port 29500 was busy already: not held here)\n");
    }
    w = InitWorld(o, {});
  }
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->rank, 0);
  EXPECT_EQ(w->world_size, 1);
  EXPECT_EQ(w->local_rank, 0);
  EXPECT_EQ(w->local_world_size, 1);
  EXPECT_EQ(w->launch.source, LaunchSource::kSingleProcess);
  EXPECT_EQ(w->launch.master_addr_from, "default");
  ASSERT_EQ(w->peers.size(), 1u);
  ASSERT_TRUE(w->store->Set("k", "v").ok());
  EXPECT_EQ(*w->store->Get("k"), "v");
}

// tcp:// names the master itself, so MPI without MASTER_ADDR is fine here.
TEST(InitWorldTest, TcpInitMethodUnderOpenMpi) {
  const std::string url = absl::StrCat("tcp://127.0.0.1:", FreePort());
  auto worlds = RunRanks(3, [&](int r) {
    InitOptions o;
    o.url = url;
    o.timeout = absl::Seconds(30);
    EnvMap env = {{"OMPI_COMM_WORLD_RANK", std::to_string(r)},
                  {"OMPI_COMM_WORLD_SIZE", "3"},
                  {"OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(r)},
                  {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"}};
    return std::make_pair(o, env);
  });
  ExpectConsistentWorld(worlds);
  EXPECT_EQ(worlds[0]->launch.source, LaunchSource::kOpenMpi);
}

TEST(InitWorldTest, FileInitMethodWithExplicitRanks) {
  const std::string path =
      absl::StrCat(getenv("TEST_TMPDIR"), "/init_file_store");
  auto worlds = RunRanks(3, [&](int r) {
    InitOptions o;
    o.url = absl::StrCat("file://", path);
    o.args.rank = r;
    o.args.world_size = 3;
    o.timeout = absl::Seconds(30);
    return std::make_pair(o, EnvMap{});
  });
  ExpectConsistentWorld(worlds);
  EXPECT_EQ(worlds[0]->launch.source, LaunchSource::kExplicit);
}

TEST(InitWorldTest, QueryParametersGiveRankAndWorldSize) {
  const int port = FreePort();
  auto worlds = RunRanks(2, [&](int r) {
    InitOptions o;
    o.url =
        absl::StrCat("tcp://127.0.0.1:", port, "?rank=", r, "&world_size=2");
    o.timeout = absl::Seconds(30);
    return std::make_pair(o, EnvMap{});
  });
  ExpectConsistentWorld(worlds);
}

TEST(InitWorldTest, MissingRankTimesOutNamingIt) {
  const std::string url = absl::StrCat("tcp://127.0.0.1:", FreePort());
  // Ranks 0 and 1 of 3 come; rank 2 never does.
  auto worlds = RunRanks(2, [&](int r) {
    InitOptions o;
    o.url = url;
    o.args.rank = r;
    o.args.world_size = 3;
    o.timeout = absl::Milliseconds(500);
    return std::make_pair(o, EnvMap{});
  });
  ASSERT_FALSE(worlds[0].ok());
  EXPECT_EQ(worlds[0].status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(worlds[0].status().message()),
              HasSubstr(absl::StrCat("[rank 0] rendezvous at ", url)));
  EXPECT_THAT(std::string(worlds[0].status().message()),
              HasSubstr("2/3 ranks joined; missing: rank 2"));
}

TEST(InitWorldTest, UnreachableMasterNamesAddressAndTimeout) {
  const int port = FreePort();
  InitOptions o;
  o.url = absl::StrCat("tcp://127.0.0.1:", port);
  o.args.rank = 1;
  o.args.world_size = 2;
  o.timeout = absl::Milliseconds(400);
  absl::StatusOr<World> w = InitWorld(o, {});
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kUnavailable);
  const std::string message(w.status().message());
  EXPECT_THAT(message, HasSubstr("[rank 1]"));
  EXPECT_THAT(message, HasSubstr(absl::StrCat("127.0.0.1:", port)));
  EXPECT_THAT(message, HasSubstr("400ms"));
}

TEST(InitWorldTest, BusyPortOnMasterIsClearError) {
  const HeldPort other(0);
  const int port = other.port();
  ASSERT_NE(port, 0);
  InitOptions o;
  o.url = absl::StrCat("tcp://127.0.0.1:", port);
  o.bind_host = "127.0.0.1";
  o.args.rank = 0;
  o.args.world_size = 2;
  o.timeout = absl::Seconds(5);
  absl::StatusOr<World> w = InitWorld(o, {});
  ASSERT_FALSE(w.ok());
  EXPECT_THAT(std::string(w.status().message()), HasSubstr("[rank 0]"));
  EXPECT_THAT(std::string(w.status().message()), HasSubstr("already in use"));
  EXPECT_THAT(std::string(w.status().message()),
              HasSubstr(absl::StrCat("is another job (or a run still shutting "
                                     "down) using it? choose another port "
                                     "than ",
                                     port)));
}

// Under a launcher (env://), the busy port names the flag that moves it.
TEST(InitWorldTest, BusyMasterPortSuggestsMasterPortFlag) {
  const HeldPort other(0);
  ASSERT_NE(other.port(), 0);
  InitOptions o;
  o.timeout = absl::Seconds(5);
  const EnvMap env = {{"RANK", "0"},
                      {"WORLD_SIZE", "2"},
                      {"MASTER_ADDR", "127.0.0.1"},
                      {"MASTER_PORT", std::to_string(other.port())}};
  absl::StatusOr<World> w = InitWorld(o, env);
  ASSERT_FALSE(w.ok());
  EXPECT_THAT(std::string(w.status().message()),
              HasSubstr(absl::StrCat(
                  "cannot listen on 127.0.0.1:", other.port(),
                  ": Address already in use; is another job (or a run still "
                  "shutting down) using it? choose another port with "
                  "--master_port (MASTER_PORT), or --master_port=0 for a free "
                  "one")));
}

// A rank that reaches another job's store, whose ranks met already (two jobs
// on one address): told so, with the flag that separates them.
TEST(InitWorldTest, RankOfAnotherJobIsToldToMoveItsPort) {
  const int port = FreePort();
  ASSERT_NE(port, 0);
  // Ranks here are threads of one process, whose records would be equal:
  // the second job's rank 1 has another local rank to tell it apart.
  auto env_of = [port](int rank, int local_rank = 0) {
    return EnvMap{{"RANK", std::to_string(rank)},
                  {"WORLD_SIZE", "2"},
                  {"LOCAL_RANK", std::to_string(local_rank)},
                  {"LOCAL_WORLD_SIZE", "2"},
                  {"MASTER_ADDR", "127.0.0.1"},
                  {"MASTER_PORT", std::to_string(port)}};
  };
  InitOptions o;
  o.timeout = absl::Seconds(20);
  absl::StatusOr<World> first0, first1;
  std::thread t([&] { first1 = InitWorld(o, env_of(1, 1)); });
  first0 = InitWorld(o, env_of(0, 0));
  t.join();
  ASSERT_TRUE(first0.ok()) << first0.status();
  ASSERT_TRUE(first1.ok()) << first1.status();
  absl::StatusOr<World> second1 = InitWorld(o, env_of(1, 0));
  ASSERT_FALSE(second1.ok());
  const std::string message(second1.status().message());
  EXPECT_THAT(message, HasSubstr("rank 1 is claimed twice"));
  EXPECT_THAT(message, HasSubstr("belongs to another job"));
  EXPECT_THAT(message, HasSubstr("--master_port=0 for a free one"));
}

// Rank 0 warns when its store is reachable beyond this host without a token
// (docs/RELIABILITY.md); on loopback, or with a token, it says nothing.
TEST(InitWorldTest, AStoreBeyondLoopbackWithoutATokenIsWarnedAbout) {
  struct Case {
    std::string bind;
    EnvMap env;
    bool warns;
  };
  const std::vector<Case> cases = {
      {"*", {}, true},
      {"127.0.0.1", {}, false},
      {"*", {{"DTRAIN_STORE_TOKEN", "s3cret"}}, false},
  };
  for (const Case& c : cases) {
    InitOptions o;
    o.url = absl::StrCat("tcp://127.0.0.1:", FreePort());
    o.bind_host = c.bind;
    o.args.rank = 0;
    o.args.world_size = 2;  // Rank 1 never comes: only the warning matters.
    o.timeout = absl::Milliseconds(200);
    ::testing::internal::CaptureStderr();
    EXPECT_FALSE(InitWorld(o, c.env).ok());
    const std::string log = ::testing::internal::GetCapturedStderr();
    if (c.warns) {
      EXPECT_THAT(log, HasSubstr("rank 0: warning: the store tcp://127.0.0.1:"))
          << c.bind;
      EXPECT_THAT(log, HasSubstr("(listening on every interface) has no "
                                 "token: anyone who can reach the port"));
      EXPECT_THAT(log, HasSubstr("Set DTRAIN_STORE_TOKEN"));
    } else {
      EXPECT_THAT(log, Not(HasSubstr("has no token"))) << c.bind;
    }
  }
}

TEST(InitWorldTest, BadInputIsInvalidArgument) {
  struct Case {
    std::string url;
    EnvMap env;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"udp://host:1", {}, "udp://host:1"},
      {"tcp://host", {}, "tcp://host"},
      {"tcp://host:99999", {}, "99999"},
      // The port defaults to 29500, the address (with several ranks) not.
      {"env://",
       {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}},
       "[rank 1] env:// with 2 ranks (from torchrun) needs the master's "
       "address: set MASTER_ADDR"},
      {"env://",
       {{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "4"}},
       "env:// with 4 ranks (from openmpi) needs the master's address: set "
       "MASTER_ADDR"},
      {"env://?rank=0&world_size=2", {}, "MASTER_ADDR"},
      {"env://",
       {{"RANK", "2"},
        {"WORLD_SIZE", "2"},
        {"MASTER_ADDR", "h"},
        {"MASTER_PORT", "1"}},
       "RANK"},
      {"file:///no/such/dir/store", {}, "/no/such/dir"},
      {"tcp://127.0.0.1:0?rank=0&world_size=2", {}, "port 0"},
  };
  for (const Case& c : cases) {
    InitOptions o;
    o.url = c.url;
    o.timeout = absl::Seconds(1);
    absl::StatusOr<World> w = InitWorld(o, c.env);
    ASSERT_FALSE(w.ok()) << c.url;
    EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument)
        << c.url << ": " << w.status();
    EXPECT_THAT(std::string(w.status().message()), HasSubstr(c.message))
        << c.url;
  }
}

}  // namespace
}  // namespace dtrain::rendezvous
