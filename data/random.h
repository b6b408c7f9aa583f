// Small, fast, portable random numbers for the data pipeline: the synthetic
// dataset and the random transforms. Every random decision is a pure function
// of (seed, epoch, example slot), never of a thread or of the order in which
// batches are prepared, which is what makes the loader give the same batches
// for any number of workers. Not for cryptography.
#ifndef DTRAIN_DATA_RANDOM_H_
#define DTRAIN_DATA_RANDOM_H_

#include <cstdint>

namespace dtrain::data::internal {

// SplitMix64's output function: a bijective mix of 64 bits in which every
// input bit affects every output bit.
inline uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Combines a seed with one more value; order matters: Combine(a, b) and
// Combine(b, a) differ.
inline uint64_t Combine(uint64_t seed, uint64_t value) {
  return Mix64(seed ^ Mix64(value + 0x632be59bd9b4e019ULL));
}

// The seed of the example in `slot` of `epoch` (the slot is the example's
// position in the padded, rank-interleaved order of DistributedSampler, so
// it is unique across ranks).
inline uint64_t ExampleSeed(uint64_t seed, int64_t epoch, int64_t slot) {
  return Combine(Combine(seed, static_cast<uint64_t>(epoch)),
                 static_cast<uint64_t>(slot));
}

// SplitMix64 generator (Steele, Lea, Flood 2014): 64 bits of state, passes
// BigCrush, and any seed (0 included) is a good seed.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  uint64_t Next() {
    state_ += 0x9e3779b97f4a7c15ULL;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

  // Uniform in [0, n) for n >= 1 (Lemire's multiply-shift; the bias, below
  // n / 2^64, is irrelevant here).
  uint64_t Uniform(uint64_t n) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(Next()) * n) >>
                                 64);
  }

  // Uniform in [0, 1), 53 random bits.
  double UniformDouble() {
    return static_cast<double>(Next() >> 11) * 0x1.0p-53;
  }

 private:
  uint64_t state_;
};

}  // namespace dtrain::data::internal

#endif  // DTRAIN_DATA_RANDOM_H_
