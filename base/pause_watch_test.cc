#include "base/pause_watch.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace dtrain::base {
namespace {

using std::chrono::steady_clock;

TEST(PauseWatchTest, ARunningProcessHasNoLongPause) {
  PauseWatch watch(absl::Milliseconds(10));
  absl::SleepFor(absl::Milliseconds(200));
  // A loaded test machine may wake the thread late, but not by seconds.
  EXPECT_LT(watch.LongestPause(), absl::Seconds(1));
}

TEST(PauseWatchTest, ATimeJumpCountsAsAPauseUntilReset) {
  std::atomic<int64_t> now_ms{0};
  auto clock = [&] {
    return steady_clock::time_point(std::chrono::milliseconds(now_ms.load()));
  };
  PauseWatch watch(absl::Milliseconds(10), clock);
  // Whether the thread woke since (and recorded the gap) or not (the gap is
  // still going on), the pause is the jump less the period.
  now_ms = 2000;
  EXPECT_EQ(watch.LongestPause(), absl::Milliseconds(1990));
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(watch.LongestPause(), absl::Milliseconds(1990));
  watch.Reset();
  EXPECT_EQ(watch.LongestPause(), absl::ZeroDuration());
  now_ms = 2500;
  EXPECT_EQ(watch.LongestPause(), absl::Milliseconds(490));
}

// The real thing: a child process with a watch is stopped with SIGSTOP for
// 800 ms and continued; it reports the pause it saw.
TEST(PauseWatchTest, SeesTheProcessStoppedAndContinued) {
  int to_child[2];
  int from_child[2];
  ASSERT_EQ(pipe(to_child), 0);
  ASSERT_EQ(pipe(from_child), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    PauseWatch watch(absl::Milliseconds(10));
    char c = 'r';
    if (write(from_child[1], &c, 1) != 1) _exit(2);
    if (read(to_child[0], &c, 1) != 1) _exit(3);
    const std::string ms =
        std::to_string(absl::ToInt64Milliseconds(watch.LongestPause()));
    if (write(from_child[1], ms.data(), ms.size()) !=
        static_cast<ssize_t>(ms.size())) {
      _exit(4);
    }
    _exit(0);
  }
  close(to_child[0]);
  close(from_child[1]);
  char c;
  ASSERT_EQ(read(from_child[0], &c, 1), 1);
  ASSERT_EQ(kill(pid, SIGSTOP), 0);
  absl::SleepFor(absl::Milliseconds(800));
  ASSERT_EQ(kill(pid, SIGCONT), 0);
  ASSERT_EQ(write(to_child[1], "g", 1), 1);
  char buf[32] = {};
  ssize_t n = 0;
  ssize_t got;
  while ((got = read(from_child[0], buf + n, sizeof(buf) - 1 - n)) > 0)
    n += got;
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  const int64_t paused_ms = std::atoll(buf);
  // SIGSTOP takes effect at once; the child may be slow to stop or run again.
  EXPECT_GE(paused_ms, 700) << buf;
  EXPECT_LT(paused_ms, 5000) << buf;
  close(to_child[1]);
  close(from_child[0]);
}

}  // namespace
}  // namespace dtrain::base
