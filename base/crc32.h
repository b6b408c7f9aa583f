// CRC-32 as zlib, gzip and PNG compute it (reflected polynomial 0xEDB88320,
// initial value and final xor 0xFFFFFFFF; "123456789" -> 0xCBF43926): the
// checksum of the checkpoint file and of the file store's records
// (docs/FORMATS.md). zlib's implementation, which is table-driven and
// several times faster than a byte loop.
#ifndef DTRAIN_BASE_CRC32_H_
#define DTRAIN_BASE_CRC32_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace dtrain::base {

// The CRC-32 of `data` (any length; thread-safe).
uint32_t Crc32(absl::string_view data);

}  // namespace dtrain::base

#endif  // DTRAIN_BASE_CRC32_H_
