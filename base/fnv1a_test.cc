#include "base/fnv1a.h"

#include <cstdint>
#include <string>

#include "gtest/gtest.h"

namespace dtrain::base {
namespace {

// Published FNV-1a 64-bit test vectors (the FNV reference's test suite).
TEST(Fnv1aTest, MatchesThePublishedVectors) {
  EXPECT_EQ(Fnv1a().digest(), 0xcbf29ce484222325ull);
  Fnv1a a;
  a.Update(absl::string_view("a"));
  EXPECT_EQ(a.digest(), 0xaf63dc4c8601ec8cull);
  Fnv1a foobar;
  foobar.Update(absl::string_view("foobar"));
  EXPECT_EQ(foobar.digest(), 0x85944171f73967e8ull);
}

TEST(Fnv1aTest, PiecesHashLikeTheWhole) {
  Fnv1a whole;
  whole.Update(absl::string_view("foobar"));
  Fnv1a pieces;
  pieces.Update(absl::string_view("foo"));
  pieces.Update('b');
  const std::string rest = "ar";
  pieces.Update(rest.data(), rest.size());
  EXPECT_EQ(pieces.digest(), whole.digest());
}

TEST(Fnv1aTest, HighBytesAreNotSignExtended) {
  Fnv1a as_char;
  as_char.Update(static_cast<char>(0xff));
  Fnv1a as_byte;
  as_byte.Update(static_cast<unsigned char>(0xff));
  EXPECT_EQ(as_char.digest(), as_byte.digest());
  EXPECT_EQ(as_byte.digest(), (Fnv1a::kOffsetBasis ^ 0xffull) * Fnv1a::kPrime);
}

}  // namespace
}  // namespace dtrain::base
