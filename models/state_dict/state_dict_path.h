// Which state_dict format a path names, by its extension; without LibTorch,
// so that flag validation can check paths cheaply.
#ifndef DTRAIN_MODELS_STATE_DICT_STATE_DICT_PATH_H_
#define DTRAIN_MODELS_STATE_DICT_STATE_DICT_PATH_H_

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"

namespace dtrain::models::state_dict {

inline constexpr char kStateDictExtensions[] = ".safetensors, .pt, .pth";

// The published safetensors format.
inline bool IsSafetensorsPath(absl::string_view path) {
  return absl::EndsWith(path, ".safetensors");
}
// torch.save's format.
inline bool IsTorchSavePath(absl::string_view path) {
  return absl::EndsWith(path, ".pt") || absl::EndsWith(path, ".pth");
}
inline bool IsStateDictPath(absl::string_view path) {
  return IsSafetensorsPath(path) || IsTorchSavePath(path);
}

}  // namespace dtrain::models::state_dict

#endif  // DTRAIN_MODELS_STATE_DICT_STATE_DICT_PATH_H_
