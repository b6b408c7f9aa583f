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

#include "absl/status/statusor.h"
#include "dist/backend/backend.h"
#include "dist/backend/gloo/gloo_options.h"
#include "dist/backend/membership.h"

namespace dtrain::backend {

// Connects and returns the backend for `group` (membership.h); its Check()
// errors for a bad membership, kUnavailable (naming the rank, the store and
// the time) when the mesh cannot be connected. Sets SIGPIPE to be ignored
// when it has its default action (which would kill the process when a peer
// dies, instead of failing the collective with the peer named). In a build
// without Gloo (CMake found none: gloo_unavailable.cc), always
// kFailedPrecondition, saying so and what to use instead.
absl::StatusOr<std::unique_ptr<Backend>> CreateGlooBackend(
    const Membership& group, const GlooBackendOptions& options = {});

// False in a build without Gloo: backends that would reach other hosts
// through Gloo fail at once on every rank (CreateGlooBackend says why), not
// only on the ranks that would call it.
bool GlooBuilt();

}  // namespace dtrain::backend

#endif  // DTRAIN_DIST_BACKEND_GLOO_GLOO_BACKEND_H_
