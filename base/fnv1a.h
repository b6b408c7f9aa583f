// FNV-1a, 64 bits: a fingerprint of bytes that is the same in every process
// and build (absl::Hash is seeded per process), for ranks that compare what
// they hold by one number. Not for adversarial input.
//
//   base::Fnv1a h;
//   h.Update(name);
//   h.Update('\n');
//   uint64_t fingerprint = h.digest();
//
// Thread-compatible value type.
#ifndef DTRAIN_BASE_FNV1A_H_
#define DTRAIN_BASE_FNV1A_H_

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace dtrain::base {

class Fnv1a {
 public:
  // The digest of no bytes (FNV's offset basis).
  static constexpr uint64_t kOffsetBasis = 14695981039346656037ull;
  static constexpr uint64_t kPrime = 1099511628211ull;

  void Update(const void* data, size_t size) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < size; ++i) Update(p[i]);
  }
  void Update(absl::string_view bytes) { Update(bytes.data(), bytes.size()); }
  void Update(unsigned char byte) {
    h_ ^= byte;
    h_ *= kPrime;
  }
  void Update(char byte) { Update(static_cast<unsigned char>(byte)); }

  uint64_t digest() const { return h_; }

 private:
  uint64_t h_ = kOffsetBasis;
};

}  // namespace dtrain::base

#endif  // DTRAIN_BASE_FNV1A_H_
