// libFuzzer entry point for the weight-file readers (torch.save's format, in
// both its zip and its legacy form, and safetensors): any bytes must give a
// file or an error, never a crash, a read out of bounds or undefined
// behaviour; and what ParseTorchSave returns must be bounded by the input:
// indices in range, each storage a distinct view of the input's bytes (so
// memory for them is at most the input's size however the names alias).
// Built and run by tools/fuzz/run_weights_fuzzer.sh.

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "models/state_dict/safetensors.h"
#include "models/state_dict/torch_save.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace sd = dtrain::models::state_dict;
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  if (auto file = sd::ParseTorchSave(bytes); file.ok()) {
    size_t storage_bytes = 0;
    for (absl::string_view s : file->storages) {
      storage_bytes += s.size();
      if (s.data() < bytes.data() || s.data() + s.size() > bytes.end())
        __builtin_trap();
    }
    if (storage_bytes > size) __builtin_trap();
    for (const auto& t : file->tensors)
      if (t.storage >= file->storages.size()) __builtin_trap();
    for (const auto& [name, index] : file->names)
      if (index >= file->tensors.size()) __builtin_trap();
  }
  (void)sd::DecodeTorchSave(bytes);
  (void)sd::DecodeSafetensors(bytes);
  return 0;
}
