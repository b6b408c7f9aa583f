// Grouping ranks by host key, the key itself (and that a child in a new PID
// namespace gets another one, where the test may create namespaces), and the
// exchange through the store naming the ranks that never published.

#include "dist/backend/hierarchical/host_layout.h"

#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "dist/store/hash_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::backend::hierarchical {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(HostLayoutTest, GroupsByKeyInRankOrder) {
  const std::vector<std::string> keys = {"b", "a", "b", "c", "a"};
  absl::StatusOr<HostLayout> l = LayoutFromKeys(keys, 4);
  ASSERT_TRUE(l.ok()) << l.status();
  ASSERT_EQ(l->hosts.size(), 3u);
  EXPECT_THAT(l->hosts[0], ElementsAre(0, 2));
  EXPECT_THAT(l->hosts[1], ElementsAre(1, 4));
  EXPECT_THAT(l->hosts[2], ElementsAre(3));
  EXPECT_EQ(l->host, 1);
  EXPECT_EQ(l->local_rank, 1);
  EXPECT_EQ(l->local_size(), 2);
  EXPECT_FALSE(l->leader());
  EXPECT_EQ(l->HostOf(3), 2);
  EXPECT_EQ(l->LocalRankOf(2), 1);
  EXPECT_EQ(l->HostOf(9), -1);
  EXPECT_EQ(l->ToString(), "ranks 0, 2 | ranks 1, 4 | rank 3");
  // Every rank computes the same hosts.
  for (int r = 0; r < 5; ++r)
    EXPECT_EQ(LayoutFromKeys(keys, r)->hosts, l->hosts);
  EXPECT_TRUE(LayoutFromKeys(keys, 0)->leader());
}

TEST(HostLayoutTest, RefusesEmptyKeysAndStrangeRanks) {
  EXPECT_EQ(LayoutFromKeys({"a", ""}, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LayoutFromKeys({"a"}, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LayoutFromKeys({"a"}, -1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(HostLayoutTest, LocalKeyNamesTheKernelAndPidNamespace) {
  absl::StatusOr<std::string> key = LocalHostKey();
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_THAT(*key, HasSubstr("boot "));
  EXPECT_THAT(*key, HasSubstr(" pidns "));
  EXPECT_EQ(*LocalHostKey(), *key);
}

TEST(HostLayoutTest, ANewPidNamespaceIsAnotherHost) {
  if (::unshare(CLONE_NEWPID) != 0) {
    GTEST_SKIP() << "cannot create a PID namespace here (needs root): "
                 << std::strerror(errno);
  }
  // Only children enter the new namespace.
  const std::string parent = *LocalHostKey();
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    absl::StatusOr<std::string> key = LocalHostKey();
    const std::string out = key.ok() ? *key : "";
    const bool written = ::write(fds[1], out.data(), out.size()) ==
                         static_cast<ssize_t>(out.size());
    ::_exit(written ? 0 : 1);
  }
  ::close(fds[1]);
  std::string child_key;
  char buf[256];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof(buf))) > 0;)
    child_key.append(buf, n);
  ::close(fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ASSERT_FALSE(child_key.empty());
  EXPECT_NE(child_key, parent);
  // Same kernel.
  EXPECT_EQ(child_key.substr(0, child_key.find(" pidns")),
            parent.substr(0, parent.find(" pidns")));
}

TEST(HostLayoutTest, ExchangeNamesTheRanksThatNeverPublished) {
  store::HashStore store;
  ASSERT_TRUE(store.Set("host_key/1", "k").ok());
  absl::StatusOr<std::vector<std::string>> keys =
      ExchangeHostKeys(store, 0, 4, "k", absl::Now() + absl::Milliseconds(200));
  ASSERT_FALSE(keys.ok());
  EXPECT_THAT(std::string(keys.status().message()),
              HasSubstr("host keys of ranks 2, 3"));
  ASSERT_TRUE(store.Set("host_key/2", "j").ok());
  ASSERT_TRUE(store.Set("host_key/3", "k").ok());
  keys = ExchangeHostKeys(store, 0, 4, "k", absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_THAT(*keys, ElementsAre("k", "k", "j", "k"));
}

}  // namespace
}  // namespace dtrain::backend::hierarchical
