#include "trainer/options/model_options.h"

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "models/model_catalog.h"
#include "models/state_dict/state_dict_path.h"
#include "trainer/options/common.h"

namespace dtrain::trainer {

using options_internal::Invalid;

absl::Status ValidateModelOptions(const ModelOptions& o) {
  // The catalog's message lists the known models and the alwayslink hint.
  if (absl::StatusOr<models::ModelInfo> found = models::FindModel(o.name);
      !found.ok()) {
    return Invalid("model", found.status().message());
  }
  if (o.small_input_stem && o.name != "resnet18") {
    return Invalid("small_input_stem", "only resnet18 has this stem");
  }
  if (!o.init_state_dict.empty() &&
      !models::state_dict::IsStateDictPath(o.init_state_dict)) {
    return Invalid(
        "init_state_dict",
        absl::StrCat("'", o.init_state_dict, "': the supported formats are ",
                     models::state_dict::kStateDictExtensions));
  }
  if (o.init_state_dict.empty() &&
      (!o.init_state_dict_strict || !o.init_state_dict_exclude.empty())) {
    return Invalid(o.init_state_dict_strict ? "init_state_dict_exclude"
                                            : "init_state_dict_strict",
                   "needs --init_state_dict");
  }
  return absl::OkStatus();
}

}  // namespace dtrain::trainer
