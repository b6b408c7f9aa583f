// libFuzzer entry point for the weight-file readers (torch.save's format, in
// both its zip and its legacy form, and safetensors): any bytes must give a
// file or an error, never a crash, a read out of bounds or undefined
// behaviour. Built and run by tools/fuzz/run_weights_fuzzer.sh.

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "models/state_dict/safetensors.h"
#include "models/state_dict/torch_save.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  (void)dtrain::models::state_dict::DecodeTorchSave(bytes);
  (void)dtrain::models::state_dict::DecodeSafetensors(bytes);
  return 0;
}
