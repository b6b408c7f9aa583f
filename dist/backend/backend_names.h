// The backend names CreateBackend (factory.h) knows, in one place for
// everything that checks a name before a backend exists (flag validation,
// help texts). Header-only, so that such checks need no backend linked.
#ifndef DTRAIN_DIST_BACKEND_BACKEND_NAMES_H_
#define DTRAIN_DIST_BACKEND_BACKEND_NAMES_H_

#include <string>
#include <vector>

namespace dtrain::backend {

// "gloo", "nccl", "shm"; thread-safe.
inline const std::vector<std::string>& KnownBackends() {
  static const auto* const kNames =
      new std::vector<std::string>{"gloo", "nccl", "shm"};
  return *kNames;
}

}  // namespace dtrain::backend

#endif  // DTRAIN_DIST_BACKEND_BACKEND_NAMES_H_
