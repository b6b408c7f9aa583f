// The cross-rank model check DistributedDataParallel runs at construction,
// as pure string work so that it is cheap to test: each rank describes its
// parameters and buffers one entry per line, the ranks compare a 64-bit
// fingerprint first, and only when fingerprints differ exchange the full
// descriptions to name the first difference and the ranks on each side.
#ifndef DTRAIN_DIST_DDP_MODEL_FINGERPRINT_H_
#define DTRAIN_DIST_DDP_MODEL_FINGERPRINT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace dtrain::ddp::internal {

// FNV-1a over the entries and their separators: stable across processes and
// builds (absl::Hash is seeded per process).
uint64_t Fingerprint(absl::Span<const std::string> entries);

// Entries joined by '\n', and back. Entries never contain '\n'.
std::string JoinEntries(absl::Span<const std::string> entries);
std::vector<std::string> SplitEntries(absl::string_view joined);

// "rank 3", "ranks 0, 2", "ranks 0-5, 7".
std::string FormatRanks(absl::Span<const int> ranks);

// The first entry where some rank differs from rank 0, e.g. "entry 4 of 8:
// ranks 0, 2 have parameter fc1.weight [64, 4608] float32; rank 1 has
// parameter fc1.weight [32, 4608] float32"; empty when every rank has the
// same entries. `per_rank[r]` holds rank r's entries.
std::string DescribeFirstMismatch(
    absl::Span<const std::vector<std::string>> per_rank);

}  // namespace dtrain::ddp::internal

#endif  // DTRAIN_DIST_DDP_MODEL_FINGERPRINT_H_
