#include "base/crc32.h"

#include <cstdint>
#include <random>
#include <string>

#include "base/crc32_testing.h"
#include "gtest/gtest.h"

namespace dtrain::base {
namespace {

TEST(Crc32Test, MatchesTheStandardCheckValue) {
  EXPECT_EQ(Crc32("123456789"), 0xCBF43926u);
  EXPECT_EQ(Crc32(""), 0u);
}

TEST(Crc32Test, MatchesTheDefinitionOnRandomInput) {
  std::mt19937 rng(7);
  for (int size : {1, 3, 16, 255, 4096, 100003}) {
    std::string data(size, '\0');
    for (char& c : data) c = static_cast<char>(rng());
    EXPECT_EQ(Crc32(data), testing::BitwiseCrc32(data)) << size;
  }
}

}  // namespace
}  // namespace dtrain::base
