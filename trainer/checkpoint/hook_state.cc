#include "trainer/checkpoint/hook_state.h"

#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "trainer/checkpoint/training_state.h"

namespace dtrain::trainer {
namespace {

std::string Quote(absl::string_view text) {
  return absl::StrCat("\"", absl::CHexEscape(text), "\"");
}

}  // namespace

absl::Status CheckHookState(const HookState& hook) {
  if (hook.name.size() > kMaxCheckpointNameSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("the communication hook's name has ", hook.name.size(),
                     " bytes, more than ", kMaxCheckpointNameSize));
  }
  if (hook.name.empty() && !hook.tensors.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("communication hook state of ", hook.tensors.size(),
                     " entries without the hook's name"));
  }
  absl::flat_hash_set<absl::string_view> names;
  for (size_t i = 0; i < hook.tensors.size(); ++i) {
    const auto& [name, tensor] = hook.tensors[i];
    if (name.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "entry ", i, " of the communication hook's state has no name"));
    }
    if (name.size() > kMaxCheckpointNameSize) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the name of entry ", i, " of the communication hook's state has ",
          name.size(), " bytes, more than ", kMaxCheckpointNameSize));
    }
    if (!names.insert(name).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the communication hook's state has ", Quote(name), " twice"));
    }
    if (!tensor.defined()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the communication hook's state ", Quote(name),
                       " is an undefined tensor"));
    }
  }
  return absl::OkStatus();
}

}  // namespace dtrain::trainer
