// What the Gloo backend is asked for: its options and allreduce algorithms.
// Free of Gloo, so that builds without Gloo (gloo_unavailable.cc) parse the
// same options and flags.
#ifndef DTRAIN_DIST_BACKEND_GLOO_GLOO_OPTIONS_H_
#define DTRAIN_DIST_BACKEND_GLOO_GLOO_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dtrain::backend {

enum class GlooAlgorithm {
  kAuto,
  kRing,
  kRingChunked,
  kHalvingDoubling,
  kBcube
};

// "auto", "ring", "ring_chunked", "halving_doubling", "bcube"; and back
// (kInvalidArgument listing the known names).
absl::string_view GlooAlgorithmName(GlooAlgorithm algorithm);
absl::StatusOr<GlooAlgorithm> ParseGlooAlgorithm(absl::string_view name);

// Gloo's own knobs; who the ranks are, their store and the timeout come in a
// Membership (membership.h).
struct GlooBackendOptions {
  // The network interface to use (what GLOO_SOCKET_IFNAME names). Empty:
  // `hostname`.
  std::string iface;
  // The address to bind and advertise. Empty: this host's name if it resolves
  // to an address, else loopback (single-machine jobs only).
  std::string hostname;
  GlooAlgorithm algorithm = GlooAlgorithm::kAuto;
  // What name() returns and messages say: the backend the user chose, which
  // is "gloo+shm" where the hierarchical backend (hierarchical_backend.h)
  // runs plain Gloo because no two ranks share a host.
  std::string name = "gloo";
  // What layout() returns; empty: not known.
  std::string layout;
};

// The allreduce algorithm kAuto picks for a message of `bytes`.
GlooAlgorithm ChooseGlooAllReduceAlgorithm(int64_t bytes, int world_size);

}  // namespace dtrain::backend

#endif  // DTRAIN_DIST_BACKEND_GLOO_GLOO_OPTIONS_H_
