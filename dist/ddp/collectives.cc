#include "dist/ddp/collectives.h"

#include "absl/strings/str_cat.h"

namespace dtrain::ddp::internal {

std::string ErrorPrefix(int rank) {
  return absl::StrCat("[rank ", rank, "] ddp: ");
}

backend::SmallCollectives DdpCollectives(backend::Backend& backend,
                                         absl::Duration timeout) {
  return backend::SmallCollectives(backend, c10::Device(c10::kCPU), timeout,
                                   ErrorPrefix(backend.rank()),
                                   "DdpOptions::timeout");
}

}  // namespace dtrain::ddp::internal
