#include "base/crc32.h"

#include <cstdint>
#include <random>
#include <string>

#include "gtest/gtest.h"

namespace dtrain::base {
namespace {

// The definition, bit by bit: what the formats' documentation specifies.
uint32_t BitwiseCrc32(const std::string& data) {
  uint32_t c = 0xFFFFFFFFu;
  for (const char ch : data) {
    c ^= static_cast<uint8_t>(ch);
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
  }
  return c ^ 0xFFFFFFFFu;
}

TEST(Crc32Test, MatchesTheStandardCheckValue) {
  EXPECT_EQ(Crc32("123456789"), 0xCBF43926u);
  EXPECT_EQ(Crc32(""), 0u);
}

TEST(Crc32Test, MatchesTheDefinitionOnRandomInput) {
  std::mt19937 rng(7);
  for (int size : {1, 3, 16, 255, 4096, 100003}) {
    std::string data(size, '\0');
    for (char& c : data) c = static_cast<char>(rng());
    EXPECT_EQ(Crc32(data), BitwiseCrc32(data)) << size;
  }
}

}  // namespace
}  // namespace dtrain::base
