// numpy's legacy numpy.random.RandomState, the part PyTorch's PowerSGD hook
// uses: MT19937 seeded with an integer and randint(high). PowerSGDState draws
// each step's seed for its random Q matrices from one (`rng.randint(
// 1_000_000_000)`), so matching its draws is what makes our Q matrices equal
// PyTorch's. The state is explicit (numpy's get_state(): 624 words and a
// position) so that a checkpoint keeps it and a resumed run draws on exactly.
//
// Thread safety: none; one owner.
#ifndef DTRAIN_DIST_DDP_HOOKS_NUMPY_RANDOM_STATE_H_
#define DTRAIN_DIST_DDP_HOOKS_NUMPY_RANDOM_STATE_H_

#include <array>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace dtrain::ddp::hooks {

class NumpyRandomState {
 public:
  static constexpr int kWords = 624;

  // numpy.random.RandomState(seed) for 0 <= seed < 2^32 (the same state as
  // std::mt19937(seed)).
  explicit NumpyRandomState(uint32_t seed);

  // The next 32-bit output of the generator.
  uint32_t NextUint32();

  // RandomState.randint(high) for 0 < high <= 2^32: numpy's legacy bounded
  // draw, a 32-bit output masked to the next power of two, redrawn while it
  // is not below `high`.
  int64_t RandInt(int64_t high);

  // numpy's get_state()[1] (the key) and [2] (the position, 0..624).
  const std::array<uint32_t, kWords>& key() const { return key_; }
  int position() const { return position_; }
  // numpy's set_state; kInvalidArgument for a position outside 0..624 or a
  // key of the wrong length.
  absl::Status SetState(absl::Span<const uint32_t> key, int position);

 private:
  void Regenerate();

  std::array<uint32_t, kWords> key_;
  int position_;
};

}  // namespace dtrain::ddp::hooks

#endif  // DTRAIN_DIST_DDP_HOOKS_NUMPY_RANDOM_STATE_H_
