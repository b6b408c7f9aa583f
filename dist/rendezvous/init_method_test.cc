#include "dist/rendezvous/init_method.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::rendezvous {
namespace {

using ::testing::HasSubstr;

// Bazel gives each test a private writable directory.
std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

void ExpectSameMethod(const InitMethod& a, const InitMethod& b) {
  EXPECT_EQ(a.scheme, b.scheme);
  EXPECT_EQ(a.host, b.host);
  EXPECT_EQ(a.port, b.port);
  EXPECT_EQ(a.path, b.path);
  EXPECT_EQ(a.rank, b.rank);
  EXPECT_EQ(a.world_size, b.world_size);
}

struct GoodUrl {
  std::string url;
  InitMethod::Scheme scheme;
  std::string host;
  int port;
  absl::optional<int> rank;
  absl::optional<int> world_size;
  std::string canonical;  // ToString()
};

void PrintTo(const GoodUrl& c, std::ostream* os) { *os << c.url; }

class ParseInitMethodTest : public ::testing::TestWithParam<GoodUrl> {};

TEST_P(ParseInitMethodTest, ParsesAndPrintsBack) {
  const GoodUrl& want = GetParam();
  absl::StatusOr<InitMethod> method = ParseInitMethod(want.url);
  ASSERT_TRUE(method.ok()) << method.status();
  EXPECT_EQ(method->scheme, want.scheme);
  EXPECT_EQ(method->host, want.host);
  EXPECT_EQ(method->port, want.port);
  EXPECT_EQ(method->path, "");
  EXPECT_EQ(method->rank, want.rank);
  EXPECT_EQ(method->world_size, want.world_size);
  EXPECT_EQ(method->ToString(), want.canonical);

  absl::StatusOr<InitMethod> again = ParseInitMethod(method->ToString());
  ASSERT_TRUE(again.ok()) << again.status();
  ExpectSameMethod(*again, *method);
}

constexpr auto kTcp = InitMethod::kTcp;
constexpr auto kEnv = InitMethod::kEnv;
const absl::optional<int> kNone;

INSTANTIATE_TEST_SUITE_P(
    Urls, ParseInitMethodTest,
    ::testing::Values(
        GoodUrl{"tcp://localhost:29500", kTcp, "localhost", 29500, kNone, kNone,
                "tcp://localhost:29500"},
        GoodUrl{"tcp://10.0.0.1:1234", kTcp, "10.0.0.1", 1234, kNone, kNone,
                "tcp://10.0.0.1:1234"},
        GoodUrl{"tcp://node-01.cluster_a:80", kTcp, "node-01.cluster_a", 80,
                kNone, kNone, "tcp://node-01.cluster_a:80"},
        GoodUrl{"tcp://[::1]:29500", kTcp, "::1", 29500, kNone, kNone,
                "tcp://[::1]:29500"},
        GoodUrl{"tcp://[fe80::1:2]:80/", kTcp, "fe80::1:2", 80, kNone, kNone,
                "tcp://[fe80::1:2]:80"},
        GoodUrl{"tcp://[::ffff:10.0.0.1]:7", kTcp, "::ffff:10.0.0.1", 7, kNone,
                kNone, "tcp://[::ffff:10.0.0.1]:7"},
        GoodUrl{"TCP://Node01:1", kTcp, "Node01", 1, kNone, kNone,
                "tcp://Node01:1"},
        // Port 0: "any free port", for the server side.
        GoodUrl{"tcp://h:0", kTcp, "h", 0, kNone, kNone, "tcp://h:0"},
        GoodUrl{"tcp://h:65535", kTcp, "h", 65535, kNone, kNone,
                "tcp://h:65535"},
        GoodUrl{"tcp://h:29500?rank=1&world_size=4", kTcp, "h", 29500, 1, 4,
                "tcp://h:29500?rank=1&world_size=4"},
        GoodUrl{"tcp://[::1]:5?world_size=4&rank=3", kTcp, "::1", 5, 3, 4,
                "tcp://[::1]:5?rank=3&world_size=4"},
        GoodUrl{"tcp://h:1?world_size=2", kTcp, "h", 1, kNone, 2,
                "tcp://h:1?world_size=2"},
        GoodUrl{"tcp://h:1?", kTcp, "h", 1, kNone, kNone, "tcp://h:1"},
        GoodUrl{"env://", kEnv, "", 0, kNone, kNone, "env://"},
        GoodUrl{"ENV://?rank=0&world_size=1", kEnv, "", 0, 0, 1,
                "env://?rank=0&world_size=1"}));

struct BadUrl {
  std::string url;
  std::string why;
};

void PrintTo(const BadUrl& c, std::ostream* os) { *os << c.url; }

class ParseInitMethodErrorTest : public ::testing::TestWithParam<BadUrl> {};

TEST_P(ParseInitMethodErrorTest, IsInvalidArgumentQuotingTheUrl) {
  absl::StatusOr<InitMethod> method = ParseInitMethod(GetParam().url);
  ASSERT_FALSE(method.ok()) << "parsed as " << method->ToString();
  EXPECT_EQ(method.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(method.status().message()),
              HasSubstr("init method '" + GetParam().url + "'"));
  EXPECT_THAT(std::string(method.status().message()),
              HasSubstr(GetParam().why));
}

INSTANTIATE_TEST_SUITE_P(
    BadUrls, ParseInitMethodErrorTest,
    ::testing::Values(
        BadUrl{"", "empty"}, BadUrl{"localhost:29500", "not a URL"},
        BadUrl{"://h:1", "not a URL"},
        BadUrl{"http://h:1", "unknown scheme 'http' (known: tcp, file, env)"},
        BadUrl{"tcp://h", "missing port"}, BadUrl{"tcp://h:", "missing port"},
        BadUrl{"tcp://h:abc", "port 'abc' is not a number"},
        BadUrl{"tcp://h:-1", "port '-1' is not a number"},
        BadUrl{"tcp://h:65536", "port 65536 is out of range 0..65535"},
        BadUrl{"tcp://h:1234567", "out of range"},
        BadUrl{"tcp://::1:29500", "IPv6 address must be in brackets"},
        BadUrl{"tcp://[::1]", "missing port"},
        BadUrl{"tcp://[::1]:", "missing port"},
        BadUrl{"tcp://[::1:29500", "not closed"},
        BadUrl{"tcp://[zz::1]:1", "'[zz::1]' is not a valid IPv6 address"},
        BadUrl{"tcp://[10.0.0.1]:1", "not a valid IPv6 address"},
        BadUrl{"tcp://[::1]x:1", "expected ':' and a port after '[::1]'"},
        BadUrl{"tcp://:29500", "no host"}, BadUrl{"tcp://", "no host"},
        BadUrl{"tcp://h:1/store", "tcp:// takes no path, got '/store'"},
        BadUrl{"tcp://bad host:1", "host 'bad host' is not a valid host name"},
        BadUrl{"tcp://user@h:1", "host 'user@h' is not a valid host name"},
        BadUrl{"tcp://10.0.0.256:1", "not a valid IPv4 address"},
        BadUrl{"tcp://h:1?rank=2&world_size=2",
               "rank=2 is not less than world_size=2"},
        BadUrl{"tcp://h:1?rank=x", "rank='x' is not a non-negative integer"},
        BadUrl{"tcp://h:1?rank=-1", "rank='-1' is not a non-negative"},
        BadUrl{"tcp://h:1?world_size=0", "world_size=0 is less than 1"},
        BadUrl{"tcp://h:1?world_size=", "world_size='' is not"},
        BadUrl{"tcp://h:1?foo=1",
               "unknown query parameter 'foo' (known: rank, world_size)"},
        BadUrl{"tcp://h:1?rank=0&rank=0", "'rank' is repeated"},
        BadUrl{"tcp://h:1?rank", "'rank' has no value"},
        BadUrl{"tcp://h:1?rank=0&", "empty query parameter"},
        BadUrl{"tcp://h:1#x", "fragment"},
        BadUrl{"env://localhost:29500", "env:// takes no host or path"},
        BadUrl{"env://?rank=1&world_size=1", "rank=1 is not less than"},
        BadUrl{"file://", "no path"},
        BadUrl{"file://relative/store",
               "path 'relative/store' is not absolute"},
        BadUrl{"file:///", "names a directory"},
        BadUrl{"file:///no-such-dtrain-dir/sub/store",
               "directory '/no-such-dtrain-dir/sub' does not exist"}));

TEST(ParseInitMethodFileTest, AcceptsFileInExistingDirectory) {
  const std::string path = TempDir() + "/store";
  absl::StatusOr<InitMethod> method = ParseInitMethod("file://" + path);
  ASSERT_TRUE(method.ok()) << method.status();
  EXPECT_EQ(method->scheme, InitMethod::kFile);
  EXPECT_EQ(method->path, path);
  EXPECT_EQ(method->host, "");
  EXPECT_EQ(method->ToString(), "file://" + path);
  absl::StatusOr<InitMethod> again = ParseInitMethod(method->ToString());
  ASSERT_TRUE(again.ok()) << again.status();
  ExpectSameMethod(*again, *method);
}

TEST(ParseInitMethodFileTest, FileDirectlyUnderRootIsAccepted) {
  absl::StatusOr<InitMethod> method =
      ParseInitMethod("file:///dtrain-store-that-need-not-exist");
  ASSERT_TRUE(method.ok()) << method.status();
  EXPECT_EQ(method->path, "/dtrain-store-that-need-not-exist");
}

TEST(ParseInitMethodFileTest, QueryIsNotPartOfThePath) {
  const std::string path = TempDir() + "/store";
  absl::StatusOr<InitMethod> method =
      ParseInitMethod("file://" + path + "?rank=1&world_size=3");
  ASSERT_TRUE(method.ok()) << method.status();
  EXPECT_EQ(method->path, path);
  EXPECT_EQ(method->rank, 1);
  EXPECT_EQ(method->world_size, 3);
  EXPECT_EQ(method->ToString(), "file://" + path + "?rank=1&world_size=3");
}

TEST(ParseInitMethodFileTest, MissingDirectoryIsNamed) {
  const std::string dir = TempDir() + "/not_created";
  const std::string url = "file://" + dir + "/store";
  absl::StatusOr<InitMethod> method = ParseInitMethod(url);
  ASSERT_FALSE(method.ok());
  EXPECT_EQ(method.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(method.status().message()),
              HasSubstr("'" + url + "'"));
  EXPECT_THAT(std::string(method.status().message()),
              HasSubstr("directory '" + dir + "' does not exist"));
}

TEST(ParseInitMethodFileTest, ParentThatIsAFileIsRejected) {
  const std::string file = TempDir() + "/plain_file";
  const int fd = open(file.c_str(), O_CREAT | O_WRONLY, 0644);
  ASSERT_GE(fd, 0);
  close(fd);
  absl::StatusOr<InitMethod> method =
      ParseInitMethod("file://" + file + "/store");
  ASSERT_FALSE(method.ok());
  EXPECT_THAT(std::string(method.status().message()),
              HasSubstr("'" + file + "' is not a directory"));
}

TEST(ParseInitMethodFileTest, PathThatIsADirectoryIsRejected) {
  const std::string dir = TempDir() + "/a_directory";
  ASSERT_EQ(mkdir(dir.c_str(), 0755) == 0 || errno == EEXIST, true);
  absl::StatusOr<InitMethod> method = ParseInitMethod("file://" + dir);
  ASSERT_FALSE(method.ok());
  EXPECT_EQ(method.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(method.status().message()),
              HasSubstr("is a directory"));
}

TEST(SchemeNameTest, NamesEveryScheme) {
  EXPECT_EQ(SchemeName(InitMethod::kTcp), "tcp");
  EXPECT_EQ(SchemeName(InitMethod::kFile), "file");
  EXPECT_EQ(SchemeName(InitMethod::kEnv), "env");
}

}  // namespace
}  // namespace dtrain::rendezvous
