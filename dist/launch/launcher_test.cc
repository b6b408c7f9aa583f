// The launcher with /bin/sh programs as ranks: environment, success, failures
// by exit code and by signal, stopping the others, restarts, and bad options.

#include "dist/launch/launcher.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/machine_limits.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::launch {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

std::string TmpDir() { return getenv("TEST_TMPDIR"); }

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

LaunchOptions Shell(int nproc, const std::string& script) {
  LaunchOptions o;
  o.nproc_per_node = nproc;
  o.master_port = 29999;
  o.stop_timeout = absl::Seconds(5);
  o.command = {"/bin/sh", "-c", script};
  return o;
}

LaunchResult MustRun(const LaunchOptions& o, std::string* log_out = nullptr) {
  std::ostringstream log;
  absl::StatusOr<LaunchResult> r = launch::Run(o, log);
  EXPECT_TRUE(r.ok()) << r.status();
  std::printf("%s", log.str().c_str());
  if (log_out != nullptr) *log_out = log.str();
  return r.ok() ? *r : LaunchResult{-1, "", 0};
}

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos;
       at = text.find(what, at + 1))
    ++n;
  return n;
}

TEST(LauncherTest, SetsTorchrunEnvironmentForEveryRank) {
  const std::string dir = TmpDir();
  LaunchOptions o =
      Shell(3, absl::StrCat("echo \"$RANK $LOCAL_RANK $WORLD_SIZE "
                            "$LOCAL_WORLD_SIZE $MASTER_ADDR $MASTER_PORT "
                            "$OMP_NUM_THREADS $OPENBLAS_NUM_THREADS "
                            "$DTRAIN_RESTART_COUNT\" > ",
                            dir, "/env.$RANK"));
  o.nnodes = 2;
  o.node_rank = 1;
  o.master_addr = "10.1.2.3";
  LaunchResult r = MustRun(o);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.summary, "all 3 rank(s) exited with code 0");
  for (int local = 0; local < 3; ++local) {
    const int rank = 3 + local;
    EXPECT_EQ(Slurp(absl::StrCat(dir, "/env.", rank)),
              absl::StrCat(rank, " ", local, " 6 3 10.1.2.3 29999 1 1 0\n"));
  }
}

TEST(LauncherTest, FailingRankStopsTheOthersAndIsNamed) {
  const absl::Time start = absl::Now();
  std::string log;
  LaunchResult r = MustRun(
      Shell(3, "if [ \"$RANK\" = 1 ]; then exit 3; fi; sleep 60"), &log);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(
      r.summary,
      MatchesRegex("rank 1 \\(local rank 1, pid [0-9]+\\) exited with code 3"));
  // Once, when it happened.
  EXPECT_EQ(Count(log, "exited with code 3"), 1) << log;
  EXPECT_THAT(log, HasSubstr("exited with code 3; stopping the other ranks"));
  EXPECT_LT(absl::Now() - start,
            absl::Seconds(4));  // Sleepers die on SIGTERM at once.
}

TEST(LauncherTest, RankKilledBySignalIsReportedAsSuch) {
  LaunchResult r =
      MustRun(Shell(2, "if [ \"$RANK\" = 0 ]; then kill -9 $$; fi; sleep 60"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.summary, HasSubstr("rank 0 (local rank 0, pid "));
  EXPECT_THAT(r.summary, HasSubstr("was killed by signal 9 (Killed)"));
}

TEST(LauncherTest, RankIgnoringSigtermIsKilledAfterTheFailureGrace) {
  LaunchOptions o = Shell(2,
                          "if [ \"$RANK\" = 1 ]; then sleep 0.2; exit 2; fi; "
                          "trap '' TERM; while :; do sleep 0.05; done");
  o.failure_grace = absl::Milliseconds(500);
  o.stop_timeout = absl::Minutes(5);  // Not the one that counts here.
  const absl::Time start = absl::Now();
  LaunchResult r = MustRun(o);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.summary, HasSubstr("rank 1"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(LauncherTest, StoppedRankIsKilledWithoutWaitingForTheGrace) {
  // Rank 0 stops itself (as SIGSTOP would); SIGTERM cannot reach it.
  LaunchOptions o = Shell(2,
                          "if [ \"$RANK\" = 1 ]; then sleep 0.5; exit 2; fi; "
                          "kill -STOP $$; sleep 60");
  o.failure_grace = absl::Minutes(5);
  std::ostringstream log;
  const absl::Time start = absl::Now();
  absl::StatusOr<LaunchResult> r = launch::Run(o, log);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 1);
  EXPECT_THAT(r->summary, HasSubstr("rank 1"));
  EXPECT_THAT(log.str(), HasSubstr("rank 0 (local rank 0, pid "));
  EXPECT_THAT(log.str(), HasSubstr("is stopped (SIGSTOP?) and cannot exit"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
}

TEST(LauncherTest, RankStoppedAfterItsPeersFinishedFailsTheJob) {
  // Rank 1 stops itself once rank 0 has exited 0: no collective is left to
  // time out, so only the launcher can end it.
  LaunchOptions o = Shell(2,
                          "if [ \"$RANK\" = 0 ]; then exit 0; fi; "
                          "sleep 0.3; kill -STOP $$; sleep 60");
  o.failure_grace = absl::Milliseconds(500);
  std::ostringstream log;
  const absl::Time start = absl::Now();
  absl::StatusOr<LaunchResult> r = launch::Run(o, log);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 1);
  EXPECT_THAT(r->summary, HasSubstr("rank 1 (local rank 1, pid "));
  EXPECT_THAT(r->summary, HasSubstr("stayed stopped (SIGSTOP?) for 500ms "
                                    "after rank 0 (local rank 0, pid "));
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
}

TEST(LauncherTest, RankStoppedForLessThanTheGraceIsLeftAlone) {
  // Stopped briefly (as by a debugger) after rank 0 finished, then continued
  // by its own child: the job succeeds.
  LaunchOptions o = Shell(2,
                          "if [ \"$RANK\" = 0 ]; then exit 0; fi; "
                          "(sleep 0.5; kill -CONT $$) & kill -STOP $$; wait");
  o.failure_grace = absl::Seconds(20);
  LaunchResult r = MustRun(o);
  EXPECT_EQ(r.exit_code, 0) << r.summary;
}

TEST(LauncherTest, NegativeDurationsAreRefused) {
  LaunchOptions o = Shell(1, "true");
  o.failure_grace = absl::Seconds(-1);
  EXPECT_THAT(std::string(ValidateLaunchOptions(o).message()),
              HasSubstr("--failure_grace=-1s must not be negative"));
}

TEST(LauncherTest, RestartsTheGroupUntilItSucceeds) {
  // Fails on the first attempt only.
  LaunchOptions o = Shell(2, "[ \"$DTRAIN_RESTART_COUNT\" -ge 1 ] || exit 5");
  o.max_restarts = 3;
  LaunchResult r = MustRun(o);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.restarts, 1);
}

TEST(LauncherTest, GivesUpAfterMaxRestarts) {
  LaunchOptions o = Shell(2, "exit 4");
  o.max_restarts = 2;
  LaunchResult r = MustRun(o);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.restarts, 2);
  EXPECT_THAT(r.summary,
              HasSubstr("exited with code 4 (after 2 restart(s), the limit)"));
}

TEST(LauncherTest, GivingUpIsSaidOnceAfterEachFailure) {
  LaunchOptions o = Shell(1, "exit 4");
  o.max_restarts = 1;
  std::string log;
  LaunchResult r = MustRun(o, &log);
  EXPECT_EQ(r.exit_code, 1);
  // One line per attempt's failure, then the end.
  EXPECT_EQ(Count(log, "exited with code 4"), 2) << log;
  EXPECT_THAT(log,
              HasSubstr("[launch] giving up after 1 restart(s), the limit"));
}

// --elastic: a failed rank does not stop the others, and with max_restarts a
// replacement starts in its place, told to join (DTRAIN_ELASTIC_JOIN=1); the
// folder of the job's addresses is the same for every rank and removed at
// the end.
TEST(LauncherTest, ElasticReplacesAFailedRankWithAJoiner) {
  const std::string dir = TmpDir() + "/replaced";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  LaunchOptions o = Shell(
      2,
      absl::StrCat(
          "d=", dir,
          "; echo \"$DTRAIN_ELASTIC_DIR\" > $d/dir.$RANK.$DTRAIN_RESTART_COUNT;"
          " test -d \"$DTRAIN_ELASTIC_DIR\" || exit 9;"
          " if [ \"$DTRAIN_ELASTIC_JOIN\" = 1 ]; then"
          " echo \"$RANK $LOCAL_RANK $DTRAIN_RESTART_COUNT\" > $d/joiner; exit "
          "0; fi;"
          " if [ \"$RANK\" = 1 ]; then exit 3; fi;"
          " i=0; while [ ! -e $d/joiner ] && [ $i -lt 100 ]; do sleep 0.1;"
          " i=$((i+1)); done"));
  o.elastic = true;
  o.max_restarts = 1;
  std::string log;
  LaunchResult r = MustRun(o, &log);
  EXPECT_EQ(r.exit_code, 0) << log;
  EXPECT_EQ(r.restarts, 1);
  EXPECT_EQ(Slurp(dir + "/joiner"), "1 1 1\n");
  EXPECT_THAT(log, MatchesRegex(".*started rank 1 \\(local rank 1, pid "
                                "[0-9]+\\) to replace it \\(1 of 1\\); it "
                                "joins the running job.*"));
  EXPECT_THAT(r.summary,
              MatchesRegex("2 rank\\(s\\) exited with code 0 after losing rank "
                           "1 .* exited with code 3 \\(1 replaced\\)"));
  const std::string elastic_dir = Slurp(dir + "/dir.0.0");
  ASSERT_FALSE(elastic_dir.empty());
  EXPECT_EQ(Slurp(dir + "/dir.1.0"), elastic_dir);
  EXPECT_EQ(Slurp(dir + "/dir.1.1"), elastic_dir);
  struct stat st;
  EXPECT_NE(::stat(elastic_dir.substr(0, elastic_dir.size() - 1).c_str(), &st),
            0)
      << "the launcher left " << elastic_dir;
}

// At most max_restarts replacements in all; none once a rank has finished
// (the job is ending: nothing to join).
TEST(LauncherTest, ElasticReplacementsAreBounded) {
  LaunchOptions o = Shell(2, "if [ \"$RANK\" = 1 ]; then exit 3; fi; sleep 2");
  o.elastic = true;
  o.max_restarts = 2;
  std::string log;
  LaunchResult r = MustRun(o, &log);
  EXPECT_EQ(r.exit_code, 0) << log;
  EXPECT_EQ(r.restarts, 2);
  EXPECT_EQ(Count(log, "exited with code 3; the others go on"), 3) << log;

  LaunchOptions late =
      Shell(2, "if [ \"$RANK\" = 1 ]; then sleep 1; exit 3; fi");
  late.elastic = true;
  late.max_restarts = 2;
  r = MustRun(late, &log);
  EXPECT_EQ(r.exit_code, 0) << log;
  EXPECT_EQ(r.restarts, 0) << log;
}

// --nnodes=1:2: node 0 starts the job, node 1's launcher starts its ranks as
// joiners; every rank learns the bounds in ranks.
TEST(LauncherTest, NodesBeyondTheMinimumJoin) {
  const std::string dir = TmpDir() + "/nodes";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  for (int node = 0; node < 2; ++node) {
    LaunchOptions o = Shell(
        2, absl::StrCat("echo \"${DTRAIN_ELASTIC_JOIN:-0} "
                        "$DTRAIN_ELASTIC_MIN_RANKS $DTRAIN_ELASTIC_MAX_RANKS "
                        "$WORLD_SIZE\" > ",
                        dir, "/env.$RANK"));
    o.elastic = true;
    o.nnodes = 1;
    o.max_nnodes = 2;
    o.node_rank = node;
    std::string log;
    LaunchResult r = MustRun(o, &log);
    EXPECT_EQ(r.exit_code, 0) << log;
    if (node == 1) {
      EXPECT_THAT(log, HasSubstr("starting 2 rank(s) that join the running job "
                                 "(node 1 of 1 to 2"));
    }
  }
  EXPECT_EQ(Slurp(dir + "/env.0"), "0 2 4 2\n");
  EXPECT_EQ(Slurp(dir + "/env.1"), "0 2 4 2\n");
  EXPECT_EQ(Slurp(dir + "/env.2"), "1 2 4 2\n");
  EXPECT_EQ(Slurp(dir + "/env.3"), "1 2 4 2\n");
}

TEST(LauncherTest, MasterPortZeroGivesEveryRankTheSameFreePort) {
  const std::string dir = TmpDir();
  LaunchOptions o =
      Shell(2, absl::StrCat("echo $MASTER_PORT > ", dir, "/port.$RANK; ",
                            "[ \"$DTRAIN_RESTART_COUNT\" -ge 1 ] || exit 5"));
  o.master_port = 0;
  o.max_restarts = 1;  // The restarted group keeps the port.
  std::string log;
  LaunchResult r = MustRun(o, &log);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.restarts, 1);
  ASSERT_GT(r.master_port, 0);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(Slurp(absl::StrCat(dir, "/port.", rank)),
              absl::StrCat(r.master_port, "\n"));
  }
  EXPECT_EQ(Count(log, absl::StrCat("master 127.0.0.1:", r.master_port,
                                    ", a free port)")),
            2)
      << log;
}

// One node, no token set: every rank gets the same random one, new for each
// run (and kept across restarts); a token the user set is passed on as is;
// several nodes get none of the launcher's making.
TEST(LauncherTest, OneNodeWithoutATokenGetsARandomOne) {
  const std::string dir = TmpDir();
  // Each rank writes its token whole (a rank stopped mid-write leaves no
  // file); in the first attempt both ranks fail, rank 1 only once rank 0 has
  // written, so the launcher cannot stop rank 0 before it did.
  const std::string file =
      absl::StrCat(dir, "/token.$RANK.$DTRAIN_RESTART_COUNT");
  const std::string script = absl::StrCat(
      "echo \"$DTRAIN_STORE_TOKEN\" > ", file, ".tmp && mv ", file, ".tmp ",
      file, "; [ \"$DTRAIN_RESTART_COUNT\" -ge 1 ] && exit 0; ",
      "[ \"$RANK\" = 1 ] && while [ ! -e ", dir,
      "/token.0.0 ]; do sleep 0.01; done; exit 5");
  ::unsetenv("DTRAIN_STORE_TOKEN");
  ::unsetenv("DTRAIN_STORE_TOKEN_FILE");
  LaunchOptions o = Shell(2, script);
  o.max_restarts = 1;
  ASSERT_EQ(MustRun(o).exit_code, 0);
  const std::string first = Slurp(absl::StrCat(dir, "/token.0.0"));
  EXPECT_THAT(first, MatchesRegex("[0-9a-f]{32}\n"));
  // (Rank 1 of the first attempt may be stopped before it writes.)
  for (const char* other : {"/token.0.1", "/token.1.1"})
    EXPECT_EQ(Slurp(absl::StrCat(dir, other)), first) << other;
  for (const char* f : {"/token.0.0", "/token.0.1", "/token.1.0", "/token.1.1"})
    ::unlink(absl::StrCat(dir, f).c_str());
  ASSERT_EQ(MustRun(o).exit_code, 0);
  EXPECT_NE(Slurp(absl::StrCat(dir, "/token.0.0")), first);

  ::setenv("DTRAIN_STORE_TOKEN", "users-own", 1);
  ASSERT_EQ(MustRun(o).exit_code, 0);
  EXPECT_EQ(Slurp(absl::StrCat(dir, "/token.1.1")), "users-own\n");
  ::unsetenv("DTRAIN_STORE_TOKEN");

  o.nnodes = 2;
  ASSERT_EQ(MustRun(o).exit_code, 0);
  EXPECT_EQ(Slurp(absl::StrCat(dir, "/token.1.1")), "\n");
}

TEST(LauncherTest, MasterPortZeroNeedsAnAddressOfThisMachine) {
  LaunchOptions o = Shell(1, "true");
  o.master_port = 0;
  o.master_addr = "192.0.2.1";  // TEST-NET-1: no machine's own address.
  std::ostringstream log;
  absl::StatusOr<LaunchResult> r = launch::Run(o, log);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("--master_port=0: cannot find a free port on "
                        "192.0.2.1 (--master_addr must be an address of this "
                        "machine)"));
}

TEST(LauncherTest, MissingProgramFailsWithCode127) {
  LaunchOptions o;
  o.command = {"/nonexistent/program"};
  LaunchResult r = MustRun(o);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.summary, HasSubstr("exited with code 127"));
}

TEST(LauncherTest, NothingIsLeftBehind) {
  // The rank leaves a background child behind and exits; the launcher kills its
  // process group.
  const std::string pid_file = TmpDir() + "/grandchild.pid";
  LaunchResult r =
      MustRun(Shell(1, absl::StrCat("sleep 300 & echo $! > ", pid_file)));
  EXPECT_EQ(r.exit_code, 0);
  const int pid = std::stoi(Slurp(pid_file));
  // Gone, or at most a zombie waiting for init, once SIGKILL has been
  // delivered.
  std::string state;
  for (int i = 0; i < 100; ++i) {
    state = Slurp(absl::StrCat("/proc/", pid, "/stat"));
    if (state.empty() || state.find(") Z ") != std::string::npos) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_TRUE(state.empty() || state.find(") Z ") != std::string::npos)
      << state;
}

TEST(LauncherTest, BadOptionsAreNamed) {
  struct Case {
    LaunchOptions options;
    std::string message;
  };
  LaunchOptions base = Shell(1, "true");
  std::vector<Case> cases;
  cases.push_back({base, ""});
  cases.back().options.command.clear();
  cases.back().message = "no program to launch";
  cases.push_back({base, "--nproc_per_node=0"});
  cases.back().options.nproc_per_node = 0;
  cases.push_back({base, "--node_rank=2 is outside [0, --nnodes=2)"});
  cases.back().options.nnodes = 2;
  cases.back().options.node_rank = 2;
  cases.push_back({base, "--master_port=70000"});
  cases.back().options.master_port = 70000;
  cases.push_back({base,
                   "--master_port=0 (a free port) works on one node "
                   "only"});
  cases.back().options.master_port = 0;
  cases.back().options.nnodes = 2;
  cases.push_back({base, "--max_restarts=-1"});
  cases.back().options.max_restarts = -1;
  cases.push_back({base, "--nnodes=1:2 (a range) needs --elastic"});
  cases.back().options.max_nnodes = 2;
  cases.push_back({base, "--nnodes=3:2: the maximum is below the minimum"});
  cases.back().options.nnodes = 3;
  cases.back().options.max_nnodes = 2;
  cases.back().options.elastic = true;
  cases.push_back(
      {base, "--node_rank=2 is outside [0, 2), the maximum of --nnodes=1:2"});
  cases.back().options.max_nnodes = 2;
  cases.back().options.node_rank = 2;
  cases.back().options.elastic = true;
  cases.push_back({base, "--master_port=0 (a free port) works on one node"});
  cases.back().options.max_nnodes = 2;
  cases.back().options.master_port = 0;
  cases.back().options.elastic = true;
  for (const Case& c : cases) {
    std::ostringstream log;
    absl::StatusOr<LaunchResult> r = launch::Run(c.options, log);
    ASSERT_FALSE(r.ok()) << c.message;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(c.message));
  }
}

// Issue #29: --nproc_per_node=1000 started 1,000 ranks until the launcher was
// OOM-killed. Now Run refuses it before starting any, naming the bound.
TEST(LauncherTest, MoreRanksThanTheMachineRunsAreRefused) {
  const base::Limit limit = base::LocalProcessLimit();
  LaunchOptions o = Shell(1, "true");
  o.nproc_per_node = static_cast<int>(limit.max + 1);
  std::ostringstream log;
  absl::StatusOr<LaunchResult> r = launch::Run(o, log);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            absl::StrCat("--nproc_per_node=", limit.max + 1, ": at most ",
                         limit.max, " (", limit.why, ")"));
  EXPECT_EQ(log.str(), "");  // Nothing started.
  o.nproc_per_node = static_cast<int>(limit.max);
  EXPECT_TRUE(ValidateLaunchOptions(o).ok());
}

TEST(LauncherTest, WorldSizesBeyondTheCapAreRefusedWithoutOverflow) {
  LaunchOptions o = Shell(2, "true");
  o.nnodes = 2147483647;
  EXPECT_THAT(std::string(ValidateLaunchOptions(o).message()),
              HasSubstr("--nnodes=2147483647: at most 1048576"));
  o.nnodes = 1 << 20;
  EXPECT_THAT(std::string(ValidateLaunchOptions(o).message()),
              HasSubstr("--nproc_per_node=2 x --nnodes=1048576 = 2097152 "
                        "ranks: at most 1048576"));
}

}  // namespace
}  // namespace dtrain::launch
