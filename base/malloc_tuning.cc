#include "base/malloc_tuning.h"

#include <cstdlib>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

// Whether a sanitizer's allocator replaces glibc's (GCC defines the
// __SANITIZE_* macros, Clang answers __has_feature).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define DTRAIN_MALLOC_REPLACED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define DTRAIN_MALLOC_REPLACED 1
#endif
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

void ReleaseFreedMemory() {
#if defined(__GLIBC__) && !defined(DTRAIN_MALLOC_REPLACED)
  ::malloc_trim(0);
#endif
}

}  // namespace dtrain::base
