// The Gloo backend: collectives on CPU tensors over Gloo's TCP transport.
//
// Construction connects Gloo's full mesh through the rendezvous store (every
// rank must construct it, with the same store namespace). One worker thread
// runs the collectives in issue order, so calls return at once; Gloo's own
// timeout bounds each collective, and its failures become errors that name the
// rank, the operation and its sequence number (see backend.h).
//
// Allreduce algorithm: by default the ring of Gloo's unbound-buffer API (no
// per-call scratch), except small messages on 16 ranks or more, which go to
// halving-doubling (2 log2(n) steps instead of 2(n-1)); `algorithm` forces one.
// The ring-chunked, halving-doubling and bcube algorithm classes allocate
// message-sized scratch on every call. bfloat16, which Gloo lacks, is
// reduced in float32 and rounded back once.
#ifndef DTRAIN_DIST_BACKEND_GLOO_GLOO_BACKEND_H_
#define DTRAIN_DIST_BACKEND_GLOO_GLOO_BACKEND_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dist/backend/backend.h"
#include "dist/store/store.h"

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

struct GlooBackendOptions {
  int rank = 0;
  int world_size = 1;
  // Where the ranks meet; the backend uses its own namespace inside it.
  std::shared_ptr<store::Store> store;
  // The network interface to use (what GLOO_SOCKET_IFNAME names). Empty:
  // `hostname`.
  std::string iface;
  // The address to bind and advertise. Empty: this host's name if it resolves
  // to an address, else loopback (single-machine jobs only).
  std::string hostname;
  // Bounds connecting and every collective.
  absl::Duration timeout = absl::Minutes(30);
  GlooAlgorithm algorithm = GlooAlgorithm::kAuto;
  // What name() returns and messages say: the backend the user chose, which
  // is "gloo+shm" where the hierarchical backend (hierarchical_backend.h)
  // runs plain Gloo because no two ranks share a host.
  std::string name = "gloo";
  // What layout() returns; empty: not known.
  std::string layout;
};

// Connects and returns the backend; kUnavailable (naming the rank, the store
// and the time) when the mesh cannot be connected. Sets SIGPIPE to be ignored
// when it has its default action (which would kill the process when a peer
// dies, instead of failing the collective with the peer named).
absl::StatusOr<std::unique_ptr<Backend>> CreateGlooBackend(
    const GlooBackendOptions& options);

// The allreduce algorithm kAuto picks for a message of `bytes`.
GlooAlgorithm ChooseGlooAllReduceAlgorithm(int64_t bytes, int world_size);

}  // namespace dtrain::backend

#endif  // DTRAIN_DIST_BACKEND_GLOO_GLOO_BACKEND_H_
