#include "dist/backend/membership.h"

#include "absl/strings/str_cat.h"

namespace dtrain::backend {

absl::Status Membership::Check(absl::string_view who) const {
  if (store == nullptr)
    return absl::InvalidArgumentError(absl::StrCat(who, ": no store given"));
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        who, ": rank ", rank, " is outside [0, ", world_size, ")"));
  }
  return absl::OkStatus();
}

}  // namespace dtrain::backend
