#include "base/malloc_tuning.h"

#include <cstdlib>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace dtrain::base {

bool TuneMallocForTraining() {
#if defined(__GLIBC__)
  // The user's own tuning, if any, is already in effect.
  if (std::getenv("GLIBC_TUNABLES") != nullptr) return true;
  const bool mmap_ok = mallopt(M_MMAP_THRESHOLD, 256 << 20) == 1;
  const bool trim_ok = mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1;
  return mmap_ok && trim_ok;
#else
  return false;
#endif
}

}  // namespace dtrain::base
