// Liveness of real processes: this one, a child that is running, one that has
// exited but is not reaped (a zombie), one that is gone, and one stopped.

#include "base/process_liveness.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gtest/gtest.h"

namespace dtrain::base {
namespace {

TEST(ProcessRunningTest, TellsRunningFromExited) {
  EXPECT_TRUE(ProcessRunning(::getpid()));
  EXPECT_FALSE(ProcessRunning(0));
  EXPECT_FALSE(ProcessRunning(-5));

  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const pid_t child = fork();
  if (child == 0) {
    close(pipe_fds[1]);
    char byte;
    if (read(pipe_fds[0], &byte, 1) < 0) _exit(1);  // Until the parent says.
    _exit(0);
  }
  close(pipe_fds[0]);
  EXPECT_TRUE(ProcessRunning(child));
  close(pipe_fds[1]);  // The child reads EOF and exits: a zombie until reaped.
  siginfo_t info{};
  ASSERT_EQ(waitid(P_PID, child, &info, WEXITED | WNOWAIT), 0);
  EXPECT_FALSE(ProcessRunning(child));
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_FALSE(ProcessRunning(child));
}

TEST(ProcessStoppedTest, TellsStoppedFromRunning) {
  EXPECT_FALSE(ProcessStopped(::getpid()));
  const pid_t child = fork();
  if (child == 0) {
    pause();
    _exit(0);
  }
  EXPECT_FALSE(ProcessStopped(child));
  ASSERT_EQ(kill(child, SIGSTOP), 0);
  siginfo_t info{};
  ASSERT_EQ(waitid(P_PID, child, &info, WSTOPPED), 0);  // Stopped by now.
  EXPECT_TRUE(ProcessStopped(child));
  EXPECT_TRUE(ProcessRunning(child));  // Stopped is not gone.
  ASSERT_EQ(kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_FALSE(ProcessStopped(child));
}

}  // namespace
}  // namespace dtrain::base
