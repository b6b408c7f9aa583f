#include "trainer/checkpoint/optimizer_codec.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "trainer/checkpoint/tensor_codec.h"
#include "trainer/checkpoint/training_state.h"

namespace dtrain::trainer::internal {

const std::vector<const OptimizerCodec*>& OptimizerCodecs() {
  static const std::vector<const OptimizerCodec*> codecs = {
      &SgdCodec(), &AdadeltaCodec(), &AdamCodec(), &AdamWCodec()};
  return codecs;
}

absl::Status ReadOptimizerStep(base::ByteReader& r, absl::string_view what,
                               int64_t* step) {
  const size_t at = r.offset();
  DTRAIN_RETURN_IF_ERROR(r.I64(absl::StrCat("step of ", what), step));
  if (*step < 0 || *step > kMaxCheckpointStep) {
    return Malformed(absl::StrCat("step of ", what, " at offset ", at, " is ",
                                  *step, ", outside [0, ", kMaxCheckpointStep,
                                  "]"));
  }
  return absl::OkStatus();
}

const OptimizerCodec* CodecFor(const torch::optim::Optimizer& optimizer) {
  for (const OptimizerCodec* codec : OptimizerCodecs()) {
    if (codec->Handles(optimizer)) return codec;
  }
  return nullptr;
}

const OptimizerCodec* CodecOfKind(uint8_t kind) {
  for (const OptimizerCodec* codec : OptimizerCodecs()) {
    if (codec->kind() == kind) return codec;
  }
  return nullptr;
}

std::string SupportedOptimizers() {
  std::vector<absl::string_view> names;
  std::vector<absl::string_view> types;
  for (const OptimizerCodec* codec : OptimizerCodecs()) {
    names.push_back(codec->name());
    types.push_back(codec->type_name());
  }
  const absl::string_view last = names.back();
  names.pop_back();
  return absl::StrCat(absl::StrJoin(names, ", "), " and ", last, " (",
                      absl::StrJoin(types, ", "), ")");
}

}  // namespace dtrain::trainer::internal
