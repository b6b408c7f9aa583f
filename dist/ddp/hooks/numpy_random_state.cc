#include "dist/ddp/hooks/numpy_random_state.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace dtrain::ddp::hooks {
namespace {

// MT19937's constants (Matsumoto and Nishimura, 1998).
constexpr int kShift = 397;
constexpr uint32_t kMatrixA = 0x9908b0dfU;
constexpr uint32_t kUpperMask = 0x80000000U;
constexpr uint32_t kLowerMask = 0x7fffffffU;

}  // namespace

NumpyRandomState::NumpyRandomState(uint32_t seed) {
  // init_genrand, as numpy's mt19937_seed and std::mt19937.
  key_[0] = seed;
  for (int i = 1; i < kWords; ++i) {
    key_[i] = 1812433253U * (key_[i - 1] ^ (key_[i - 1] >> 30)) +
              static_cast<uint32_t>(i);
  }
  position_ = kWords;
}

void NumpyRandomState::Regenerate() {
  for (int i = 0; i < kWords; ++i) {
    const uint32_t y =
        (key_[i] & kUpperMask) | (key_[(i + 1) % kWords] & kLowerMask);
    key_[i] =
        key_[(i + kShift) % kWords] ^ (y >> 1) ^ ((y & 1U) ? kMatrixA : 0U);
  }
  position_ = 0;
}

uint32_t NumpyRandomState::NextUint32() {
  if (position_ == kWords) Regenerate();
  uint32_t y = key_[position_++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680U;
  y ^= (y << 15) & 0xefc60000U;
  y ^= y >> 18;
  return y;
}

int64_t NumpyRandomState::RandInt(int64_t high) {
  const uint32_t max = static_cast<uint32_t>(high - 1);
  if (max == 0) return 0;  // numpy draws nothing for a range of one
  // The smallest all-ones mask covering `max`.
  uint32_t mask = max;
  mask |= mask >> 1;
  mask |= mask >> 2;
  mask |= mask >> 4;
  mask |= mask >> 8;
  mask |= mask >> 16;
  uint32_t value;
  do {
    value = NextUint32() & mask;
  } while (value > max);
  return value;
}

absl::Status NumpyRandomState::SetState(absl::Span<const uint32_t> key,
                                        int position) {
  if (key.size() != static_cast<size_t>(kWords)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "an MT19937 state has ", kWords, " words, not ", key.size()));
  }
  if (position < 0 || position > kWords) {
    return absl::InvalidArgumentError(
        absl::StrCat("an MT19937 position is 0..", kWords, ", not ", position));
  }
  std::copy(key.begin(), key.end(), key_.begin());
  position_ = position;
  return absl::OkStatus();
}

}  // namespace dtrain::ddp::hooks
