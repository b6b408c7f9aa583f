#include "base/crc32.h"

#include <zlib.h>

namespace dtrain::base {

uint32_t Crc32(absl::string_view data) {
  // crc32_z takes a size_t length, so inputs over 4 GiB need no chunking.
  return static_cast<uint32_t>(
      crc32_z(crc32_z(0, Z_NULL, 0),
              reinterpret_cast<const Bytef*>(data.data()), data.size()));
}

}  // namespace dtrain::base
