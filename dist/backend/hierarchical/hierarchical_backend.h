// The CPU backend for ranks spread over hosts: shared memory among the ranks
// of each host (shm_backend.h) and Gloo over TCP among one leader per host
// (gloo_backend.h), as NCCL does inside and between nodes and Horovod's
// hierarchical allreduce does on CPUs. An allreduce is a shared-memory
// allreduce on every host (a reduce to the leader for a tensor in a buffer
// from AllocateBuffer), a Gloo allreduce among the leaders, and a
// shared-memory broadcast from each leader, so every rank gets bit-identical
// results. A reduce_scatter is a reduce to each leader, a Gloo reduce_scatter
// of the host blocks among the leaders, and each rank's copy of its host's
// block; an allgather the same backwards: no full allreduce in either. They
// run in place on the caller's tensors when these lie back to back in a
// buffer from AllocateBuffer and the hosts hold consecutive ranks (as
// launchers start them), and in a scratch buffer of the host's shared memory,
// kept for the next call, otherwise; every rank of a host must pass the same
// kind of tensors.
//
// Which ranks share a host comes from host_layout.h (boot id and PID
// namespace, exchanged through the store) and is then proven by the
// shared-memory backend mapping one segment; ranks whose keys match but cannot
// map each other's memory fail creation, naming them, rather than quietly
// going over TCP.
//
// CreateHierarchicalBackend returns the simplest backend the layout needs:
// the shm backend when every rank is on one host, the Gloo backend when no
// two ranks share one, and the hierarchical backend otherwise. Each is named
// "gloo+shm", in name() and its messages, as the caller chose; layout() says
// how the ranks are spread ("2 hosts: ranks 0, 1 | ranks 2, 3").
//
// Same contract as backend.h. Collectives run in issue order on one worker
// thread, which drives the host's shm backend and (on leaders) the leaders'
// Gloo backend. Errors name this rank, the collective and the step that
// failed, with the inner backend's message (whose rank numbers are local to
// the host, or host indices among the leaders: the message maps them):
// "[rank 3] gloo+shm allreduce #7 (...) failed after 2.1s: shared-memory step
// on host 1 (local ranks 0, 1 are ranks 2, 3): [rank 1] shm allreduce #7
// (...): rank 0 (pid 4242) has exited". A rank whose collective fails aborts
// both inner backends (Backend::Abort): the ranks of its host learn it at once
// through the segment, and its Gloo connections close when the process exits
// instead of waiting for the other leaders, so the other hosts learn it then
// (or at their timeout, if the process lives on).
#ifndef DTRAIN_DIST_BACKEND_HIERARCHICAL_HIERARCHICAL_BACKEND_H_
#define DTRAIN_DIST_BACKEND_HIERARCHICAL_HIERARCHICAL_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "dist/backend/backend.h"
#include "dist/backend/gloo/gloo_backend.h"
#include "dist/backend/membership.h"

namespace dtrain::backend {

// The hierarchical backend's own knobs; who the ranks are, their store and the
// timeout come in a Membership (membership.h), from which it makes the inner
// backends' memberships (local ranks on each host, host indices among the
// leaders).
struct HierarchicalBackendOptions {
  // The Gloo settings used among the leaders (name and layout are set here).
  GlooBackendOptions gloo;
  // Bytes per rank's slot in each host's segment (ShmBackendOptions).
  int64_t shm_slot_bytes = int64_t{4} << 20;
  // This rank's host key; empty: hierarchical::LocalHostKey(). Tests give
  // ranks running as threads of one process different "hosts".
  std::string host_key;
};

// kInvalidArgument for a bad membership (Membership::Check); the errors of the
// key exchange and of the inner backends' creation otherwise, prefixed
// "[rank R] gloo+shm".
absl::StatusOr<std::unique_ptr<Backend>> CreateHierarchicalBackend(
    const Membership& group, const HierarchicalBackendOptions& options = {});

}  // namespace dtrain::backend

#endif  // DTRAIN_DIST_BACKEND_HIERARCHICAL_HIERARCHICAL_BACKEND_H_
