#include "base/process_memory.h"

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::base {
namespace {

constexpr int64_t kMiB = 1 << 20;

TEST(ProcessMemoryTest, ParsesThePssLine) {
  const char text[] =
      "00400000-7ffd0000 ---p 00000000 00:00 0    [rollup]\n"
      "Rss:              524288 kB\n"
      "Pss:              262144 kB\n"
      "Pss_Anon:         100 kB\n";
  absl::StatusOr<int64_t> pss = ParsePssBytes(text);
  ASSERT_TRUE(pss.ok()) << pss.status();
  EXPECT_EQ(*pss, 256 * kMiB);
  EXPECT_EQ(ParsePssBytes("Rss: 5 kB\n").status().code(),
            absl::StatusCode::kInternal);
  EXPECT_FALSE(ParsePssBytes("Pss: many kB\n").ok());
}

// Touched private pages count in full; pages shared with one other process
// count half in PSS, in full in the peak resident set.
TEST(ProcessMemoryTest, SharedPagesCountOnceAcrossTheProcesses) {
  absl::StatusOr<ProcessMemory> before = ReadProcessMemory();
  if (before.status().code() == absl::StatusCode::kUnavailable) {
    GTEST_SKIP() << before.status();
  }
  ASSERT_TRUE(before.ok()) << before.status();
  constexpr size_t kBytes = 64 * kMiB;
  void* shared = ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(shared, MAP_FAILED);
  std::memset(shared, 1, kBytes);
  absl::StatusOr<ProcessMemory> alone = ReadProcessMemory();
  ASSERT_TRUE(alone.ok()) << alone.status();
  EXPECT_GT(alone->pss_bytes - before->pss_bytes, 60 * kMiB);
  EXPECT_GT(alone->peak_rss_bytes - before->peak_rss_bytes, 60 * kMiB);

  // A child maps the same pages: each process's PSS holds half of them.
  int ready[2], done[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(done), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Read every page (volatile: the reads are not optimised away).
    const volatile char* pages = static_cast<const volatile char*>(shared);
    for (size_t i = 0; i < kBytes; i += 4096) (void)pages[i];
    char c = 1;
    (void)!::write(ready[1], &c, 1);
    (void)!::read(done[0], &c, 1);
    ::_exit(0);
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  absl::StatusOr<ProcessMemory> together = ReadProcessMemory();
  c = 1;
  (void)!::write(done[1], &c, 1);
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(together.ok()) << together.status();
  EXPECT_LT(together->pss_bytes, alone->pss_bytes - 24 * kMiB);
  EXPECT_GE(together->peak_rss_bytes, alone->peak_rss_bytes);
  ::munmap(shared, kBytes);
  for (int fd : {ready[0], ready[1], done[0], done[1]}) ::close(fd);
}

}  // namespace
}  // namespace dtrain::base
