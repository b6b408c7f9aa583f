#include "dist/backend/gloo/gloo_options.h"

#include "absl/strings/str_cat.h"

namespace dtrain::backend {
namespace {

// kAuto: on 2 and 4 ranks the unbound-buffer ring was fastest at every size
// from 4 B to 64 MiB (docs/PERFORMANCE.md). Halving-doubling is used for small
// messages from 16 ranks on, where the ring's step count dominates (not
// measurable on this machine).
constexpr int kHalvingDoublingMinRanks = 16;
constexpr int64_t kHalvingDoublingMaxBytes = 16 * 1024;

}  // namespace

absl::string_view GlooAlgorithmName(GlooAlgorithm algorithm) {
  switch (algorithm) {
    case GlooAlgorithm::kAuto:
      return "auto";
    case GlooAlgorithm::kRing:
      return "ring";
    case GlooAlgorithm::kRingChunked:
      return "ring_chunked";
    case GlooAlgorithm::kHalvingDoubling:
      return "halving_doubling";
    case GlooAlgorithm::kBcube:
      return "bcube";
  }
  return "unknown";
}

absl::StatusOr<GlooAlgorithm> ParseGlooAlgorithm(absl::string_view name) {
  for (GlooAlgorithm a :
       {GlooAlgorithm::kAuto, GlooAlgorithm::kRing, GlooAlgorithm::kRingChunked,
        GlooAlgorithm::kHalvingDoubling, GlooAlgorithm::kBcube}) {
    if (name == GlooAlgorithmName(a)) return a;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown gloo allreduce algorithm '", name,
      "' (known: auto, ring, ring_chunked, halving_doubling, bcube)"));
}

GlooAlgorithm ChooseGlooAllReduceAlgorithm(int64_t bytes, int world_size) {
  // The ring takes 2(n-1) latency-bound steps, halving-doubling 2 log2(n): at
  // scale, small messages go to halving-doubling despite its per-call setup.
  return world_size >= kHalvingDoublingMinRanks &&
                 bytes <= kHalvingDoublingMaxBytes
             ? GlooAlgorithm::kHalvingDoubling
             : GlooAlgorithm::kRing;
}

}  // namespace dtrain::backend
