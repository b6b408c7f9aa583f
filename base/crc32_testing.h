// For tests: CRC-32 computed from its definition, bit by bit, so that tests of
// the formats (checkpoint, file store) check their bytes against an
// implementation independent of base::Crc32's (zlib's).
#ifndef DTRAIN_BASE_CRC32_TESTING_H_
#define DTRAIN_BASE_CRC32_TESTING_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace dtrain::base::testing {

// Reflected polynomial 0xEDB88320, initial value and final xor 0xFFFFFFFF.
inline uint32_t BitwiseCrc32(absl::string_view data) {
  uint32_t c = 0xFFFFFFFFu;
  for (const char ch : data) {
    c ^= static_cast<uint8_t>(ch);
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
  }
  return c ^ 0xFFFFFFFFu;
}

}  // namespace dtrain::base::testing

#endif  // DTRAIN_BASE_CRC32_TESTING_H_
